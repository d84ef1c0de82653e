// _dispatch.cpp: kiln's opt-in C++ dispatcher kernels for aten entries and C++ gates for module
// entries (kiln.install(..., dispatch="cpp")). Built on demand by python/kiln/install_cpp.py with
// torch.utils.cpp_extension.load into kiln's cache.
//
// A module entry's bound forward is a ModuleForward (install_module.py binds it): it reads the
// module's tensors and hands them to its ModuleGate, the same tensor checks and launch as below
// without schema arguments; a miss runs the module's own forward.
//
// For one overridden (aten overload, dispatch key) it registers ONE boxed kernel, at run time, with
// a torch::Library of kind IMPL for namespace "aten". The kernel holds every entry's gate as plain
// C++ data and does, per call, what the generated Python gate of install.py does (same rule, same
// order):
//
//   - each schema argument against the captured call: a tensor slot, or a constant (None, bool, a
//   number
//     compared by value, an int list, a string, a dtype), or, where the captured call left the
//     argument out, the schema default with the same IValue tag (what PyTorch's Python argument
//     parsing does when it strips defaults before a Python kernel sees the call);
//   - each gate tensor: dtype, sizes, strides, device (cpu; or cuda with the library's device
//   index),
//     a data pointer aligned to ALIGN bytes (16; docs/abi.md), not a wrapped Python number;
//   - grad mode on and a gate tensor that requires grad: a grad fallback (counted as such and as a
//   miss);
//   - on a hit: dense copies (copy_strides) for inputs captured with gaps, outputs with at::empty_strided at
//   the
//     captured sizes/strides/dtype, zeroed scratch, then libkiln_rt's kiln_rt_launch through the
//     function pointer Python took from ctypes, on PyTorch's current stream (cuda builds; nullptr
//     on cpu); an in-place overload copies into self and returns self;
//   - on a miss: the kernel PyTorch had for this key, taken with
//     OperatorHandle::getComputedKernelForDispatchKey before kiln registers (a
//     c10::SafeKernelFunction, what torch.library.get_kernel returns in Python), called boxed on
//     the untouched stack: wrapped numbers stay tensors, so no conversion is needed.
//
// For composite ops (CompositeImplicitAutograd) the Autograd<key> entry is registered too: a call
// that needs a gradient runs the original autograd-key kernel (the composite), any other goes to
// the gate above.
//
// Counters are int64 words owned by Python (ctypes arrays in Installation's stats dicts).
// Destroying the returned Registration (Registration.destroy()) deregisters both kernels: PyTorch's
// table is recomputed from its own registrations, exactly as before.

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/frontend/tracer.h>

#ifdef KILN_WITH_CUDA
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

constexpr uintptr_t ALIGN = 16; // install.py's ALIGN

using LaunchFn = int (*)(void *rt, int entry, void *const *ptrs, int n_ptrs, const int64_t *axes,
                         void *stream);
using LastErrorFn = const char *(*)();

enum ArgKind { A_TENSOR = 0, A_NONE, A_BOOL, A_NUMBER, A_INTLIST, A_STR, A_DTYPE, A_DEFAULT };

struct ArgSpec {
    int kind = A_DEFAULT;
    int64_t slot = 0;          // A_TENSOR
    bool b = false;            // A_BOOL
    double d = 0;              // A_NUMBER
    int64_t i = 0;             // A_NUMBER when is_int
    bool is_int = false;       // A_NUMBER: the captured number was an int
    std::vector<int64_t> ints; // A_INTLIST
    std::string s;             // A_STR
    int64_t dtype = 0;         // A_DTYPE (a c10::ScalarType)
    c10::IValue def;           // A_DEFAULT: the schema's default
};

struct TensorGate {
    std::vector<int64_t> sizes, strides;
    c10::ScalarType dtype;
    // captured as a slice with gaps: proved on its dense copy with these strides (install_gate.copy_strides:
    // dense in the captured memory order); empty for any other input
    std::vector<int64_t> copy_strides;
};

struct Entry {
    std::string name;
    int index = 0;
    std::vector<ArgSpec> args; // one per schema argument
    std::vector<TensorGate> inputs, outputs;
    int64_t scratch_bytes = 0; // 0: none
    int64_t *hits = nullptr;
};

c10::ScalarType dtype_from_name(const std::string &name) {
    static const std::pair<const char *, c10::ScalarType> table[] = {
        {"float64", c10::kDouble},
        {"float32", c10::kFloat},
        {"float16", c10::kHalf},
        {"bfloat16", c10::kBFloat16},
        {"float8_e4m3fn", c10::ScalarType::Float8_e4m3fn},
        {"float8_e5m2", c10::ScalarType::Float8_e5m2},
        {"int64", c10::kLong},
        {"int32", c10::kInt},
        {"int16", c10::kShort},
        {"int8", c10::kChar},
        {"uint8", c10::kByte},
        {"bool", c10::kBool},
        {"complex64", c10::kComplexFloat},
        {"complex128", c10::kComplexDouble},
    };
    std::string n = name.rfind("torch.", 0) == 0 ? name.substr(6) : name;
    for (const auto &p : table)
        if (n == p.first)
            return p.second;
    throw std::invalid_argument("kiln dispatch: unknown dtype '" + name + "'");
}

// A wrapped Python number (x + 1e-6 arrives at aten::add.Tensor as a 0-dim CPU tensor so marked).
inline bool is_wrapped(const at::Tensor &t) {
    return t.unsafeGetTensorImpl()->is_wrapped_number();
}

// install.py's _same_constant for a number: ints and floats by value, bools never equal a number.
bool same_number(const c10::IValue &v, const ArgSpec &a) {
    if (v.isInt())
        return a.is_int ? v.toInt() == a.i : static_cast<double>(v.toInt()) == a.d;
    if (v.isDouble())
        return v.toDouble() == a.d;
    if (v.isTensor()) {
        const at::Tensor &t = v.toTensor();
        if (!t.defined() || !is_wrapped(t) || !t.has_storage() || t.const_data_ptr() == nullptr)
            return false;
        switch (t.scalar_type()) {
        case c10::kDouble:
            return *static_cast<const double *>(t.const_data_ptr()) == a.d;
        case c10::kLong: {
            int64_t x = *static_cast<const int64_t *>(t.const_data_ptr());
            return a.is_int ? x == a.i : static_cast<double>(x) == a.d;
        }
        default:
            return false; // a wrapped bool or complex is no number for the gate
        }
    }
    return false;
}

bool same_default(const c10::IValue &v, const c10::IValue &def) {
    if (def.isNone())
        return v.isNone();
    if (def.isBool())
        return v.isBool() && v.toBool() == def.toBool();
    if (def.isInt())
        return v.isInt() && v.toInt() == def.toInt();
    if (def.isDouble())
        return v.isDouble() && v.toDouble() == def.toDouble();
    if (def.isString())
        return v.isString() && v.toStringRef() == def.toStringRef();
    if (def.isIntList())
        return v.isIntList() && v.toIntVector() == def.toIntVector();
    return false;
}

bool supported_default(const c10::IValue &def) {
    return def.isNone() || def.isBool() || def.isInt() || def.isDouble() || def.isString() ||
           def.isIntList();
}

bool same_const(const c10::IValue &v, const ArgSpec &a) {
    switch (a.kind) {
    case A_NONE:
        return v.isNone();
    case A_BOOL:
        if (v.isBool())
            return v.toBool() == a.b;
        if (v.isTensor()) {
            const at::Tensor &t = v.toTensor();
            return t.defined() && is_wrapped(t) && t.scalar_type() == c10::kBool &&
                   t.has_storage() && t.const_data_ptr() != nullptr &&
                   *static_cast<const bool *>(t.const_data_ptr()) == a.b;
        }
        return false;
    case A_NUMBER:
        return same_number(v, a);
    case A_INTLIST: {
        if (!v.isIntList())
            return false;
        auto live = v.toIntList();
        if (live.size() != a.ints.size())
            return false;
        for (size_t k = 0; k < a.ints.size(); k++)
            if (live.get(k) != a.ints[k])
                return false;
        return true;
    }
    case A_STR:
        return v.isString() && v.toStringRef() == a.s;
    case A_DTYPE:
        return v.isInt() && v.toInt() == a.dtype;
    case A_DEFAULT:
        return same_default(v, a.def);
    default:
        return false;
    }
}

bool any_requires_grad(const c10::IValue *args, size_t n) {
    for (size_t k = 0; k < n; k++) {
        const c10::IValue &v = args[k];
        if (v.isTensor()) {
            if (v.toTensor().requires_grad())
                return true;
        } else if (v.isTensorList()) {
            for (const at::Tensor &t : v.toTensorList())
                if (t.requires_grad())
                    return true;
        } else if (v.isList()) {
            for (const c10::IValue &x : v.toListRef())
                if (x.isTensor() && x.toTensor().requires_grad())
                    return true;
        }
    }
    return false;
}

// Where a hit launches: libkiln_rt's launcher and the device it serves.
struct Launcher {
    bool cuda = false;
    int device_index = 0;
    void *rt = nullptr;
    LaunchFn launch = nullptr;
    LastErrorFn last_error = nullptr;

    // Whether t passes gate g: dtype, strided layout, sizes, strides, device, alignment.
    bool admits(const TensorGate &g, const at::Tensor &t) const {
        if (!t.defined() || is_wrapped(t) || !t.has_storage() || t.const_data_ptr() == nullptr)
            return false; // a tensor without data (fake, meta) is never a hit
        if (t.scalar_type() != g.dtype || t.layout() != c10::kStrided ||
            !t.sizes().equals(g.sizes) || !t.strides().equals(g.strides))
            return false;
        if (cuda ? (!t.is_cuda() || t.get_device() != device_index) : !t.is_cpu())
            return false;
        return reinterpret_cast<uintptr_t>(t.const_data_ptr()) % ALIGN == 0;
    }

    // An output at the gate's sizes, strides and dtype: the device's allocator directly (what
    // at::empty_strided's CPU or CUDA kernel calls), without a trip through the dispatcher; the
    // caching allocator serves it on the current stream, as it does PyTorch's own outputs.
    at::Tensor empty(const TensorGate &g, const c10::Device &dev) const {
#ifdef KILN_WITH_CUDA
        if (cuda)
            return at::Tensor(at::detail::empty_strided_cuda(g.sizes, g.strides, g.dtype, dev));
#endif
        (void)dev;
        return at::Tensor(at::detail::empty_strided_cpu(g.sizes, g.strides, g.dtype));
    }

    // The launch of entry e on gate tensors that passed admits() (tensors[k] for e.inputs[k]):
    // dense copies of inputs captured with gaps, outputs at the captured sizes/strides/dtype,
    // zeroed scratch, kiln_rt_launch on PyTorch's current stream. Returns 2 (nothing launched) when
    // grad mode is on and an input requires grad; else 1, with the outputs appended to outs.
    int run(const Entry &e, const at::Tensor *const *tensors, std::vector<at::Tensor> *outs) const {
        const size_t n_in = e.inputs.size();
        if (c10::GradMode::is_enabled()) {
            for (size_t k = 0; k < n_in; k++)
                if (tensors[k]->requires_grad())
                    return 2;
        }
        void *ptrs[40];
        std::vector<at::Tensor> keep; // contiguous copies and scratch
        size_t n = 0;
        for (size_t k = 0; k < n_in; k++) {
            if (!e.inputs[k].copy_strides.empty()) {
                const at::Tensor &t = *tensors[k];
                keep.push_back(at::empty_strided(t.sizes(), e.inputs[k].copy_strides, t.options()).copy_(t));
                ptrs[n++] = const_cast<void *>(keep.back().const_data_ptr());
            } else {
                ptrs[n++] = const_cast<void *>(tensors[k]->const_data_ptr());
            }
        }
        const c10::Device dev =
            cuda ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device_index))
                 : c10::Device(c10::kCPU);
        const size_t first_out = outs->size();
        for (const TensorGate &g : e.outputs)
            outs->push_back(empty(g, dev));
        for (size_t k = first_out; k < outs->size(); k++)
            ptrs[n++] = (*outs)[k].mutable_data_ptr();
        if (e.scratch_bytes > 0) {
            keep.push_back(
                at::zeros({e.scratch_bytes}, at::TensorOptions().dtype(c10::kByte).device(dev)));
            ptrs[n++] = keep.back().mutable_data_ptr();
        }
        void *stream = nullptr;
#ifdef KILN_WITH_CUDA
        if (cuda)
            stream = static_cast<void *>(
                c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_index))
                    .stream());
#endif
        if (launch(rt, e.index, ptrs, static_cast<int>(n), nullptr, stream) != 0) {
            const char *why = last_error ? last_error() : nullptr;
            TORCH_CHECK(false, "kiln: ", e.name, ": ", why ? why : "launch failed");
        }
        (*e.hits)++;
        return 1;
    }
};

// One (overload, key): its entries, the original kernels, the launcher and the counters.
struct Override {
    c10::OperatorHandle op;
    c10::DispatchKey key;
    c10::SafeKernelFunction original;
    std::unique_ptr<c10::SafeKernelFunction> original_autograd; // composite ops only
    std::vector<Entry> entries;
    size_t n_args = 0;
    bool inplace = false;
    Launcher L;
    int64_t *counts = nullptr; // hits, misses, grad fallbacks

    Override(c10::OperatorHandle op_, c10::DispatchKey key_, c10::SafeKernelFunction original_)
        : op(std::move(op_)), key(key_), original(std::move(original_)) {}

    // 1: hit (outputs pushed), 0: miss, 2: needs a gradient.
    int try_entry(const Entry &e, c10::Stack *stack) const {
        const c10::IValue *args = stack->data() + (stack->size() - n_args);
        const at::Tensor *tensors[16];
        for (size_t p = 0; p < n_args; p++) {
            const ArgSpec &a = e.args[p];
            const c10::IValue &v = args[p];
            if (a.kind != A_TENSOR) {
                if (!same_const(v, a))
                    return 0;
                continue;
            }
            if (!v.isTensor() || !L.admits(e.inputs[a.slot], v.toTensor()))
                return 0;
            tensors[a.slot] = &v.toTensor();
        }
        std::vector<at::Tensor> outs;
        outs.reserve(e.outputs.size());
        if (L.run(e, tensors, &outs) == 2)
            return 2;
        counts[0]++;
        if (inplace) {
            at::Tensor self = *tensors[0];
            self.copy_(outs[0]);
            torch::jit::drop(*stack, n_args);
            stack->emplace_back(std::move(self));
            return 1;
        }
        torch::jit::drop(*stack, n_args);
        for (at::Tensor &t : outs)
            stack->emplace_back(std::move(t));
        return 1;
    }

    void call(c10::DispatchKeySet ks, c10::Stack *stack) const {
        for (const Entry &e : entries) {
            int r = try_entry(e, stack);
            if (r == 1)
                return;
            if (r == 2) {
                counts[2]++;
                break;
            }
        }
        counts[1]++;
        original.callBoxed(op, ks, stack);
    }

    void call_autograd(c10::DispatchKeySet ks, c10::Stack *stack) const {
        const c10::IValue *args = stack->data() + (stack->size() - n_args);
        if (c10::GradMode::is_enabled() && any_requires_grad(args, n_args)) {
            counts[2]++;
            original_autograd->callBoxed(op, c10::DispatchKeySet(autograd_key()), stack);
            return;
        }
        // A trace (dynamo's fake tensors, AOTAutograd's functionalization: a Python or Functionalize
        // key) gets the composite's decomposition, as it does without kiln and on the Python path,
        // whose miss calls the composite: redispatched below autograd, the trace recorded the
        // composite whole (aten.conv2d in kiln's graph mode), and no pattern traced from its
        // decomposition (a chain's convolution) matched anything in that graph.
        if (ks.has(c10::DispatchKey::Python) || ks.has(c10::DispatchKey::Functionalize)) {
            original_autograd->callBoxed(op, c10::DispatchKeySet(autograd_key()), stack);
            return;
        }
        // Else on below autograd through the dispatcher, not straight into call(): the backend
        // key, this override's call(), for real tensors, and whatever mode sits between. Called
        // straight, dynamo's fake tensors reached the gate and a launch on no data (a segfault,
        // tracing a composite entry with dispatch "cpp").
        op.redispatchBoxed(ks & c10::after_autograd_keyset, stack);
    }

    c10::DispatchKey autograd_key() const {
        return key == c10::DispatchKey::CUDA ? c10::DispatchKey::AutogradCUDA
                                             : c10::DispatchKey::AutogradCPU;
    }
};

// A module entry's gate: the module's tensors (activation and parameters, in the entry's input
// order) are checked and launched here in one call from its ModuleForward below.
struct ModuleGate {
    Entry e; // args unused: a module entry has only tensors
    Launcher L;
    int64_t *counts = nullptr; // hits, misses, grad fallbacks

    // The output for objs[0..n) (the gate's inputs, in order) on a hit; nullptr on a miss or where
    // a gradient is needed (counted as both). A new reference.
    PyObject *hit(PyObject *const *objs, size_t n) const {
        const size_t n_in = e.inputs.size();
        if (n != n_in || n_in > 16) {
            counts[1]++;
            return nullptr;
        }
        at::Tensor held[16];
        const at::Tensor *tensors[16];
        for (size_t k = 0; k < n_in; k++) {
            PyObject *o = objs[k];
            if (o == nullptr || !THPVariable_Check(o) ||
                !L.admits(e.inputs[k], (held[k] = THPVariable_Unpack(o)))) {
                counts[1]++;
                return nullptr;
            }
            tensors[k] = &held[k];
        }
        std::vector<at::Tensor> outs;
        outs.reserve(1);
        if (L.run(e, tensors, &outs) == 2) {
            counts[2]++; // a grad fallback is a miss too, as on the aten path
            counts[1]++;
            return nullptr;
        }
        counts[0]++;
        return THPVariable_Wrap(std::move(outs[0]));
    }
};

// Interned keys: the installation's "active"; in a module's __dict__ (ModuleCall below) kiln's
// "_kiln_fast", "forward", "_compiled_call_impl" and the four hook dicts.
PyObject *k_active, *k_fast, *k_forward, *k_compiled, *k_hooks[4];

// A module entry's whole bound forward (dispatch "cpp", outside torch.compile's tracing): the
// module's __call__ calls it directly, and it reads the gate's tensors itself (each activation
// from the call's arguments, each parameter or buffer from the dict that held it at binding,
// getattr where that dict no longer has it), so that a hit runs no Python code of kiln's. Any
// other call (the installation no longer active, keyword arguments, another number of arguments,
// a tensor the gate refuses) is a miss: counted, then the module's own forward. Module and
// installation are held by weak references, the own forward as its function where it is the
// module's bound method, so the object (which the collector cannot see into) makes no cycle with
// the module.
struct ModuleForward {
    py::object gate_obj; // the ModuleGate, kept alive
    const ModuleGate *g = nullptr;
    py::object module_ref, inst_ref; // weakref.ref objects
    std::vector<int> act;            // per gate input: its activation's index in args, or -1
    std::vector<py::object> names;   // per gate input: the attribute's name (str), or None
    std::vector<py::object> dicts;   // per gate input: the dict that held the attribute, or None
    size_t n_act = 0;
    py::object own;           // the module's own forward
    bool own_unbound = false; // own is its function: called with the module first

    py::object call(const py::args &args, const py::kwargs &kwargs) const {
        PyObject *mod = PyWeakref_GetObject(module_ref.ptr()); // borrowed
        if (mod == nullptr)
            throw py::error_already_set();
        if (kwargs && py::len(kwargs) != 0) {
            g->counts[1]++;
            return own_call_kw(mod, args, kwargs);
        }
        const size_t n = PyTuple_GET_SIZE(args.ptr());
        // the module before the arguments, as ModuleCall passes them
        std::vector<PyObject *> with_mod(n + 1);
        with_mod[0] = mod;
        for (size_t k = 0; k < n; k++)
            with_mod[k + 1] = PyTuple_GET_ITEM(args.ptr(), k);
        PyObject *r = run(mod, with_mod.data(), n);
        if (r == nullptr)
            throw py::error_already_set();
        return py::reinterpret_steal<py::object>(r);
    }

    // The call on positional arguments args[1..n] (args[0] is mod: the module, borrowed, or None
    // where it no longer exists): kiln's output on a hit, else the module's own forward (a miss,
    // counted). A new reference, or nullptr with a Python error set.
    PyObject *run(PyObject *mod, PyObject *const *args, size_t n) const {
        PyObject *inst = PyWeakref_GetObject(inst_ref.ptr());
        if (inst == nullptr)
            return nullptr;
        if (mod == Py_None || inst == Py_None || n != n_act) {
            g->counts[1]++;
            return own_call(mod, args, n);
        }
        PyObject *active = PyObject_GetAttr(inst, k_active);
        if (active == nullptr)
            return nullptr;
        const int on = PyObject_IsTrue(active);
        Py_DECREF(active);
        if (on < 0)
            return nullptr;
        if (on == 0) {
            g->counts[1]++;
            return own_call(mod, args, n);
        }
        const size_t n_in = act.size();
        PyObject *objs[16];
        py::object got[16]; // attributes read by getattr (new references)
        for (size_t k = 0; k < n_in && k < 16; k++) {
            if (act[k] >= 0) {
                objs[k] = args[1 + act[k]];
                continue;
            }
            PyObject *o =
                dicts[k].is_none() ? nullptr : PyDict_GetItem(dicts[k].ptr(), names[k].ptr());
            if (o == nullptr) {
                o = PyObject_GetAttr(mod, names[k].ptr());
                if (o == nullptr) {
                    PyErr_Clear();
                    o = Py_None;
                    Py_INCREF(o);
                }
                got[k] = py::reinterpret_steal<py::object>(o);
            }
            objs[k] = o;
        }
        PyObject *out;
        try {
            out = g->hit(objs, n_in); // counts the hit, the miss or the grad fallback
        } catch (const c10::Error &e) {
            PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
            return nullptr;
        } catch (const std::exception &e) {
            PyErr_SetString(PyExc_RuntimeError, e.what());
            return nullptr;
        }
        if (out != nullptr)
            return out;
        return own_call(mod, args, n);
    }

    // The module's own forward on args[1..n] (args[0] is the module).
    PyObject *own_call(PyObject *mod, PyObject *const *args, size_t n) const {
        if (!own_unbound)
            return PyObject_Vectorcall(own.ptr(), args + 1, n, nullptr);
        if (mod == nullptr || mod == Py_None) {
            PyErr_SetString(PyExc_RuntimeError,
                            "kiln: the module of this forward no longer exists");
            return nullptr;
        }
        return PyObject_Vectorcall(own.ptr(), args, n + 1, nullptr);
    }

    py::object own_call_kw(PyObject *mod, const py::args &args, const py::kwargs &kwargs) const {
        if (!own_unbound)
            return own(*args, **kwargs);
        if (mod == Py_None)
            throw std::runtime_error("kiln: the module of this forward no longer exists");
        py::tuple full(py::len(args) + 1);
        full[0] = py::reinterpret_borrow<py::object>(mod);
        for (size_t k = 0; k < py::len(args); k++)
            full[k + 1] = args[k];
        PyObject *r = PyObject_Call(own.ptr(), full.ptr(), kwargs.ptr());
        if (r == nullptr)
            throw py::error_already_set();
        return py::reinterpret_steal<py::object>(r);
    }
};

// A module's call where kiln swapped its class (install_module.py, _swap_class): the swapped
// class's __call__ is this object, a method descriptor, so module(x) arrives here with the module
// first, without nn.Module.__call__'s Python frames (about 1 us of a hit). Where that call would
// do more than call forward (the module's or global hooks, a module.compile(), the JIT tracer),
// or where the module's forward is no longer the one kiln bound (its "_kiln_fast" tuple starts
// (bound forward, ModuleForward, ...)), it calls nn.Module.__call__ itself; else the ModuleForward
// directly. Read from the class (type(module).__call__, which dynamo inlines) it is
// nn.Module.__call__, and from the module its bound method, so torch.compile traces the module
// as it did before the swap.
struct ModuleCall {
    PyObject_HEAD vectorcallfunc vectorcall;
    PyObject *module_call; // torch.nn.Module.__call__
    PyObject *hooks[4];    // torch.nn.modules.module's global hook dicts (never rebound there)
};

// The ModuleForward that mod's call may go to directly (a new reference, held while it runs: its
// own forward may uninstall kiln; *f its C++ object), or an empty object where nn.Module.__call__
// must run.
py::object fast_forward(const ModuleCall *mc, PyObject *mod, const ModuleForward **f) {
    if (torch::jit::tracer::isTracing())
        return py::object();
    for (PyObject *h : mc->hooks)
        if (PyDict_Size(h) != 0)
            return py::object();
    PyObject *d = PyObject_GenericGetDict(mod, nullptr);
    if (d == nullptr) {
        PyErr_Clear();
        return py::object();
    }
    py::object dict = py::reinterpret_steal<py::object>(d);
    PyObject *fast = PyDict_GetItem(d, k_fast);
    if (fast == nullptr || !PyTuple_Check(fast) || PyTuple_GET_SIZE(fast) < 2 ||
        PyDict_GetItem(d, k_forward) != PyTuple_GET_ITEM(fast, 0))
        return py::object();
    for (PyObject *k : k_hooks) {
        PyObject *h = PyDict_GetItem(d, k);
        if (h == nullptr || !PyDict_Check(h) || PyDict_Size(h) != 0)
            return py::object();
    }
    // module.compile() sets it; else it is nn.Module's None
    PyObject *compiled = PyDict_GetItem(d, k_compiled);
    if (compiled != nullptr && compiled != Py_None)
        return py::object();
    py::handle h = PyTuple_GET_ITEM(fast, 1);
    if (!py::isinstance<ModuleForward>(h))
        return py::object();
    *f = h.cast<const ModuleForward *>();
    // the ModuleForward of another module (a tuple copied over by hand) reads that module
    if (PyWeakref_GetObject((*f)->module_ref.ptr()) != mod)
        return py::object();
    return py::reinterpret_borrow<py::object>(h);
}

PyObject *module_call_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames) {
    const auto *mc = reinterpret_cast<const ModuleCall *>(self);
    const Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n >= 1 && (kwnames == nullptr || PyTuple_GET_SIZE(kwnames) == 0)) {
        py::object held;
        const ModuleForward *f = nullptr;
        try {
            held = fast_forward(mc, args[0], &f);
        } catch (const std::exception &) {
            PyErr_Clear(); // nn.Module.__call__ below
        }
        if (held)
            return f->run(args[0], args, static_cast<size_t>(n - 1));
    }
    return PyObject_Vectorcall(mc->module_call, args, nargsf, kwnames);
}

PyObject *module_call_get(PyObject *self, PyObject *obj, PyObject *) {
    auto *mc = reinterpret_cast<ModuleCall *>(self);
    if (obj == nullptr) {
        Py_INCREF(mc->module_call);
        return mc->module_call;
    }
    return PyMethod_New(mc->module_call, obj);
}

void module_call_dealloc(PyObject *self) {
    auto *mc = reinterpret_cast<ModuleCall *>(self);
    Py_XDECREF(mc->module_call);
    for (PyObject *h : mc->hooks)
        Py_XDECREF(h);
    PyObject_Free(self);
}

PyTypeObject ModuleCallType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// module_call(nn.Module.__call__, [the four global hook dicts]) -> ModuleCall
py::object make_module_call(py::object module_call, const py::list &hooks) {
    if (!PyCallable_Check(module_call.ptr()))
        throw std::invalid_argument("nn.Module.__call__ is not callable");
    if (hooks.size() != 4)
        throw std::invalid_argument("four global hook dicts");
    for (const py::handle &h : hooks)
        if (!PyDict_Check(h.ptr()))
            throw std::invalid_argument("a global hook table that is not a dict");
    ModuleCall *mc = PyObject_New(ModuleCall, &ModuleCallType);
    if (mc == nullptr)
        throw py::error_already_set();
    mc->vectorcall = module_call_vectorcall;
    mc->module_call = module_call.release().ptr();
    for (size_t k = 0; k < 4; k++)
        mc->hooks[k] = py::reinterpret_borrow<py::object>(hooks[k]).release().ptr();
    return py::reinterpret_steal<py::object>(reinterpret_cast<PyObject *>(mc));
}

void ready_module_call_type() {
    static const char *hook_names[4] = {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                                        "_backward_pre_hooks"};
    k_active = PyUnicode_InternFromString("active");
    k_fast = PyUnicode_InternFromString("_kiln_fast");
    k_forward = PyUnicode_InternFromString("forward");
    k_compiled = PyUnicode_InternFromString("_compiled_call_impl");
    for (size_t k = 0; k < 4; k++)
        k_hooks[k] = PyUnicode_InternFromString(hook_names[k]);
    ModuleCallType.tp_name = "kiln_dispatch.ModuleCall";
    ModuleCallType.tp_doc = "a swapped module class's __call__ (kiln, _dispatch.cpp)";
    ModuleCallType.tp_basicsize = sizeof(ModuleCall);
    ModuleCallType.tp_flags =
        Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR;
    ModuleCallType.tp_vectorcall_offset = offsetof(ModuleCall, vectorcall);
    ModuleCallType.tp_call = PyVectorcall_Call;
    ModuleCallType.tp_descr_get = module_call_get;
    ModuleCallType.tp_dealloc = module_call_dealloc;
    if (PyType_Ready(&ModuleCallType) < 0)
        throw py::error_already_set();
}

struct BackendKernel final : c10::OperatorKernel {
    std::shared_ptr<Override> ov;
    explicit BackendKernel(std::shared_ptr<Override> o) : ov(std::move(o)) {}
    void operator()(const c10::OperatorHandle &, c10::DispatchKeySet ks, torch::jit::Stack *stack) {
        ov->call(ks, stack);
    }
};

struct AutogradKernel final : c10::OperatorKernel {
    std::shared_ptr<Override> ov;
    explicit AutogradKernel(std::shared_ptr<Override> o) : ov(std::move(o)) {}
    void operator()(const c10::OperatorHandle &, c10::DispatchKeySet ks, torch::jit::Stack *stack) {
        ov->call_autograd(ks, stack);
    }
};

struct Silent final : c10::WarningHandler {
    void process(const c10::Warning &) override {
    } // "Overriding a previously registered kernel": the point
};

// What Python holds: the registrations (destroy() undoes them) and the state, for inspection.
struct Registration {
    std::unique_ptr<torch::Library> lib;
    std::shared_ptr<Override> ov;
    std::string op_name;
    bool composite = false;
    void destroy() {
        Silent silent;
        c10::WarningUtils::WarningHandlerGuard guard(&silent);
        lib.reset();
    }
    ~Registration() {
        try {
            destroy();
        } catch (...) {
        }
    }
};

std::vector<int64_t> int_vector(const py::handle &h) {
    return py::cast<std::vector<int64_t>>(h);
}

ArgSpec parse_arg(const py::handle &h, const c10::Argument &schema_arg, size_t n_inputs) {
    py::tuple t = py::reinterpret_borrow<py::tuple>(h);
    ArgSpec a;
    a.kind = py::cast<int>(t[0]);
    switch (a.kind) {
    case A_TENSOR:
        a.slot = py::cast<int64_t>(t[1]);
        if (a.slot < 0 || static_cast<size_t>(a.slot) >= n_inputs)
            throw std::invalid_argument("bad tensor slot");
        break;
    case A_NONE:
        break;
    case A_BOOL:
        a.b = py::cast<bool>(t[1]);
        break;
    case A_NUMBER:
        a.d = py::cast<double>(t[1]);
        a.is_int = !t[2].is_none();
        if (a.is_int)
            a.i = py::cast<int64_t>(t[2]);
        break;
    case A_INTLIST:
        a.ints = int_vector(t[1]);
        break;
    case A_STR:
        a.s = py::cast<std::string>(t[1]);
        break;
    case A_DTYPE:
        a.dtype = static_cast<int64_t>(dtype_from_name(py::cast<std::string>(t[1])));
        break;
    case A_DEFAULT: {
        const auto &def = schema_arg.default_value();
        if (!def.has_value())
            throw std::invalid_argument("argument '" + schema_arg.name() + "' has no default");
        if (!supported_default(*def))
            throw std::invalid_argument("argument '" + schema_arg.name() +
                                        "' has a default of an unsupported type");
        a.def = *def;
        break;
    }
    default:
        throw std::invalid_argument("bad argument kind");
    }
    return a;
}

TensorGate parse_tensor(const py::handle &h) {
    py::tuple t = py::reinterpret_borrow<py::tuple>(h);
    TensorGate g;
    g.sizes = int_vector(t[0]);
    g.strides = int_vector(t[1]);
    if (g.sizes.size() != g.strides.size())
        throw std::invalid_argument("sizes and strides differ in length");
    g.dtype = dtype_from_name(py::cast<std::string>(t[2]));
    if (py::len(t) > 3 && !t[3].is_none())
        g.copy_strides = int_vector(t[3]);
    if (!g.copy_strides.empty() && g.copy_strides.size() != g.sizes.size())
        throw std::invalid_argument("copy strides and sizes differ in length");
    return g;
}

Launcher make_launcher(bool cuda, int device_index, uintptr_t rt, uintptr_t launch_addr,
                       uintptr_t last_error_addr) {
#ifndef KILN_WITH_CUDA
    if (cuda)
        throw std::invalid_argument("this build of kiln's dispatch extension has no CUDA support");
#endif
    if (!rt || !launch_addr)
        throw std::invalid_argument("null runtime or launcher");
    Launcher L;
    L.cuda = cuda;
    L.device_index = device_index;
    L.rt = reinterpret_cast<void *>(rt);
    L.launch = reinterpret_cast<LaunchFn>(launch_addr);
    L.last_error = reinterpret_cast<LastErrorFn>(last_error_addr);
    return L;
}

// An entry's name, index, gate tensors, scratch and hit counter from its spec dict (below).
Entry parse_entry(const py::dict &d) {
    Entry e;
    e.name = py::cast<std::string>(d["name"]);
    e.index = py::cast<int>(d["index"]);
    for (const py::handle &t : py::reinterpret_borrow<py::list>(d["inputs"]))
        e.inputs.push_back(parse_tensor(t));
    for (const py::handle &t : py::reinterpret_borrow<py::list>(d["outputs"]))
        e.outputs.push_back(parse_tensor(t));
    if (e.inputs.size() > 16 || e.inputs.size() + e.outputs.size() + 1 > 40)
        throw std::invalid_argument("too many tensors for the C++ gate");
    if (e.outputs.empty())
        throw std::invalid_argument("an entry without outputs");
    e.scratch_bytes = py::cast<int64_t>(d["scratch_bytes"]);
    e.hits = reinterpret_cast<int64_t *>(py::cast<uintptr_t>(d["hits_addr"]));
    if (!e.hits)
        throw std::invalid_argument("null entry counter");
    return e;
}

// register_override(name, overload, key, inplace, composite, cuda, device_index, rt_handle,
// launch_addr,
//                   last_error_addr, counts_addr, entries) -> Registration
// entries: [{"name", "index", "args": [(kind, ...) per schema argument], "inputs": [(sizes,
// strides, dtype,
//            copy strides or None)], "outputs": [(sizes, strides, dtype)], "scratch_bytes", "hits_addr"}]
std::unique_ptr<Registration>
register_override(const std::string &name, const std::string &overload, const std::string &key_name,
                  bool inplace, bool composite, bool cuda, int device_index, uintptr_t rt,
                  uintptr_t launch_addr, uintptr_t last_error_addr, uintptr_t counts_addr,
                  const py::list &entries) {
    try {
        if (!counts_addr)
            throw std::invalid_argument("null counters");
        c10::DispatchKey key;
        if (key_name == "CPU")
            key = c10::DispatchKey::CPU;
        else if (key_name == "CUDA")
            key = c10::DispatchKey::CUDA;
        else
            throw std::invalid_argument("dispatch key " + key_name + " (CPU or CUDA)");
        auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
        if (!handle)
            throw std::invalid_argument("no operator " + name + "." + overload);
        const c10::FunctionSchema &schema = handle->schema();
        // The original kernels, taken before kiln registers anything.
        auto ov =
            std::make_shared<Override>(*handle, key, handle->getComputedKernelForDispatchKey(key));
        const c10::DispatchKey akey = key == c10::DispatchKey::CUDA ? c10::DispatchKey::AutogradCUDA
                                                                    : c10::DispatchKey::AutogradCPU;
        if (composite)
            ov->original_autograd = std::make_unique<c10::SafeKernelFunction>(
                handle->getComputedKernelForDispatchKey(akey));
        ov->n_args = schema.arguments().size();
        ov->inplace = inplace;
        ov->L = make_launcher(cuda, device_index, rt, launch_addr, last_error_addr);
        ov->counts = reinterpret_cast<int64_t *>(counts_addr);
        for (const py::handle &h : entries) {
            py::dict d = py::reinterpret_borrow<py::dict>(h);
            Entry e = parse_entry(d);
            py::list args = py::reinterpret_borrow<py::list>(d["args"]);
            if (args.size() != ov->n_args)
                throw std::invalid_argument("expected one argument spec per schema argument");
            std::vector<bool> seen(e.inputs.size(), false);
            for (size_t p = 0; p < ov->n_args; p++) {
                e.args.push_back(parse_arg(args[p], schema.arguments()[p], e.inputs.size()));
                if (e.args.back().kind == A_TENSOR) {
                    if (seen[e.args.back().slot])
                        throw std::invalid_argument("a tensor slot used twice");
                    seen[e.args.back().slot] = true;
                }
            }
            for (bool s : seen)
                if (!s)
                    throw std::invalid_argument("a gate tensor at no argument");
            if (inplace && e.args[0].kind != A_TENSOR)
                throw std::invalid_argument("an in-place overload whose self is not a gate tensor");
            ov->entries.push_back(std::move(e));
        }
        if (ov->entries.empty())
            throw std::invalid_argument("no entries");
        auto reg = std::make_unique<Registration>();
        reg->ov = ov;
        reg->op_name = overload.empty() ? name : name + "." + overload;
        reg->composite = composite;
        Silent silent;
        c10::WarningUtils::WarningHandlerGuard guard(&silent);
        reg->lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", std::nullopt,
                                                    __FILE__, __LINE__);
        reg->lib->impl(reg->op_name.c_str(),
                       torch::dispatch(key, torch::CppFunction::makeFromBoxedFunctor(
                                                std::make_unique<BackendKernel>(ov))));
        if (composite)
            reg->lib->impl(reg->op_name.c_str(),
                           torch::dispatch(akey, torch::CppFunction::makeFromBoxedFunctor(
                                                     std::make_unique<AutogradKernel>(ov))));
        return reg;
    } catch (const c10::Error &e) {
        throw std::runtime_error(e.what_without_backtrace());
    }
}

// module_gate(entry, cuda, device_index, rt_handle, launch_addr, last_error_addr, counts_addr) ->
// ModuleGate; entry as register_override's, without "args" (the module's tensors in input order).
std::unique_ptr<ModuleGate> module_gate(const py::dict &entry, bool cuda, int device_index,
                                        uintptr_t rt, uintptr_t launch_addr,
                                        uintptr_t last_error_addr, uintptr_t counts_addr) {
    if (!counts_addr)
        throw std::invalid_argument("null counters");
    auto g = std::make_unique<ModuleGate>();
    g->L = make_launcher(cuda, device_index, rt, launch_addr, last_error_addr);
    g->e = parse_entry(entry);
    if (g->e.outputs.size() != 1)
        throw std::invalid_argument("a module entry returns one tensor");
    g->counts = reinterpret_cast<int64_t *>(counts_addr);
    return g;
}

// gate.forward(module_ref, inst_ref, slots, own, own_unbound) -> ModuleForward; slots: per gate
// input, an int (the activation's index in the forward's arguments) or (name, dict or None).
ModuleForward module_forward(py::object gate, py::object module_ref, py::object inst_ref,
                             const py::list &slots, py::object own, bool own_unbound) {
    ModuleForward f;
    f.g = gate.cast<const ModuleGate *>();
    f.gate_obj = gate;
    if (slots.size() != f.g->e.inputs.size()) // more than 16 inputs: every call is a miss (hit())
        throw std::invalid_argument("one slot per gate input");
    for (const py::handle &h : slots) {
        if (py::isinstance<py::int_>(h)) {
            f.act.push_back(h.cast<int>());
            f.names.push_back(py::none());
            f.dicts.push_back(py::none());
            f.n_act++;
        } else {
            py::tuple t = py::reinterpret_borrow<py::tuple>(h);
            f.act.push_back(-1);
            f.names.push_back(py::str(t[0]));
            if (!t[1].is_none() && !py::isinstance<py::dict>(t[1]))
                throw std::invalid_argument("a slot's holder is a dict or None");
            f.dicts.push_back(py::reinterpret_borrow<py::object>(t[1]));
        }
    }
    for (int a : f.act)
        if (a >= static_cast<int>(f.n_act))
            throw std::invalid_argument("an activation index out of range");
    f.module_ref = module_ref;
    f.inst_ref = inst_ref;
    f.own = own;
    f.own_unbound = own_unbound;
    return f;
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "kiln's C++ dispatcher kernels for aten entries (python/kiln/_dispatch.cpp)";
    m.attr("ABI") = 4;
#ifdef KILN_WITH_CUDA
    m.attr("CUDA") = true;
#else
    m.attr("CUDA") = false;
#endif
    m.attr("ALIGN") = static_cast<int>(ALIGN);
    py::class_<Registration>(m, "Registration")
        .def("destroy", &Registration::destroy,
             "deregisters kiln's kernels (PyTorch's own are used again)")
        .def_property_readonly("active",
                               [](const Registration &r) { return static_cast<bool>(r.lib); })
        .def_property_readonly("op", [](const Registration &r) { return r.op_name; })
        .def_property_readonly("composite", [](const Registration &r) { return r.composite; })
        .def_property_readonly("entries", [](const Registration &r) {
            std::vector<std::string> names;
            for (const Entry &e : r.ov->entries)
                names.push_back(e.name);
            return names;
        });
    m.def("register_override", &register_override,
          "registers one boxed kernel for (aten overload, key)");
    py::class_<ModuleGate>(m, "ModuleGate")
        .def_property_readonly("entry", [](const ModuleGate &g) { return g.e.name; })
        .def("forward", &module_forward,
             "forward(module_ref, inst_ref, slots, own, own_unbound): the whole bound forward in "
             "C++");
    m.def("module_gate", &module_gate, "the C++ gate and launch of one module entry");
    ready_module_call_type();
    m.def("module_call", &make_module_call,
          "module_call(nn.Module.__call__, global hook dicts): a swapped module class's __call__");
    py::class_<ModuleForward>(m, "ModuleForward", py::dynamic_attr())
        .def("__call__", &ModuleForward::call,
             "the module's output: kiln's kernel on a hit, else the module's own forward");
}
