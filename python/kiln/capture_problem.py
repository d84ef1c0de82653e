"""Problem writing for `kiln capture`: how a held tensor is stored, how a captured aten call or a traced
leaf-module forward becomes a reference `run()`, and how a problem directory (definition.json,
workload.jsonl, tensors/*.safetensors) is written in the SOL-ExecBench schema.

Layouts. Kernels receive dense row-major tensors (docs/abi.md), and the reference receives exactly what the
workload stores. A captured tensor is therefore stored in its *memory order*: a tensor whose elements are
dense in some dimension order (channels-last activations, a transposed weight) is stored as that dense
permutation, and the reference permutes it back — a free view with exactly the captured strides — before
the call; a dimension broadcast with stride 0 (an expanded attention mask) is stored once and expanded
again in the reference. So the reference calls the captured overload on tensors with the captured strides,
and a kernel reads the bytes the model really has. Outputs are returned in their memory order the same way.
Only tensors with gaps or overlaps (slices of a larger buffer) are stored as a contiguous copy; the
reference then receives them contiguous, and their captured strides and storage offsets are kept in
definition.json ("kiln": {"strides", "storage_offsets"}) for the install gate.
"""

from __future__ import annotations

import json
import math
import os
import re
import uuid
from dataclasses import dataclass
from typing import Optional

import torch

DTYPE_NAMES = {
    torch.float64: "float64", torch.float32: "float32", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e5m2: "float8_e5m2",
    torch.int64: "int64", torch.int32: "int32", torch.int16: "int16", torch.int8: "int8",
    torch.uint8: "uint8", torch.bool: "bool",
}
DTYPE_SHORT = {
    torch.float64: "f64", torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.float8_e4m3fn: "f8e4m3", torch.float8_e5m2: "f8e5m2", torch.int64: "i64", torch.int32: "i32",
    torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8", torch.bool: "b8",
}
# The gate's default tolerances (docs/gate.md), used to check that a reference reproduces the model.
TOLERANCE = {
    torch.float32: (1e-5, 1e-4), torch.bfloat16: (1e-2, 2e-2), torch.float16: (1e-3, 1e-2),
    torch.float64: (1e-8, 1e-7),
}
_UUID_NAMESPACE = uuid.UUID("6b696c6e-6361-7074-7572-650000000001")


SPOOL_CHUNK_BYTES = 64 << 20  # host memory of one copy step: device -> host -> spool file


@dataclass
class Stored:
    """What capture kept of one tensor: its captured layout always; a full copy in the spool (path) when
    the caps allowed one; a summary (kiln.capture_stats: statistics and structure) and a leading slice
    (slice_path, slice_elements) when it is not kept whole or is bigger than a slice. The kept data is in
    memory order (see the module docstring): data_shape is its shape."""
    shape: tuple         # the captured shape
    stride: tuple        # the captured strides
    offset: int          # the captured storage offset
    dtype: torch.dtype
    data_shape: tuple    # the shape of the data as stored (memory order, broadcast dims once)
    perm: Optional[list]    # the captured tensor (before expansion) is data.permute(inverse(perm))
    expand: bool            # the captured tensor is that, expanded to shape
    exact: bool             # the reference can rebuild the captured strides
    path: Optional[str] = None        # the full copy, raw bytes in the spool
    summary: Optional[dict] = None    # {"stats", "structure"} of the data
    slice_path: Optional[str] = None  # raw bytes in the spool that begin with its first slice_elements
    slice_elements: int = 0           # elements (path itself when there is a full copy)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.data_shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def held(self) -> bool:
        return self.path is not None

    @property
    def spooled_bytes(self) -> int:
        own_slice = self.slice_path is not None and self.slice_path != self.path
        return (self.nbytes if self.path else 0) + (self.slice_elements * self.dtype.itemsize if own_slice else 0)

    def load(self) -> torch.Tensor:
        """The full copy, read from the spool (a host tensor of data_shape)."""
        assert self.path is not None, "a tensor that was not kept whole"
        return _read_raw(self.path, self.numel, self.dtype).reshape(self.data_shape)

    @property
    def data(self) -> torch.Tensor:
        return self.load()

    def layout_json(self) -> dict:
        if not self.exact:
            kind = "contiguous_copy"
        elif self.perm is None and not self.expand:
            kind = "contiguous"
        else:
            kind = "memory_order"
        out = {"stored": kind, "stored_shape": list(self.data_shape)}
        if self.perm is not None:
            out["permute"] = list(self.perm)
        if self.expand:
            out["expand"] = list(self.shape)
        return out


def _read_raw(path: str, numel: int, dtype: torch.dtype) -> torch.Tensor:
    if numel == 0:
        return torch.empty(0, dtype=dtype)
    return torch.from_file(path, shared=False, size=numel, dtype=dtype)


def layout_of(t: torch.Tensor) -> tuple:
    """(Stored with t's layout and nothing kept, t's data in memory order as a view of t: dense when the
    layout is exact, else t itself)."""
    t = t.detach()
    shape, stride = tuple(int(s) for s in t.shape), tuple(int(s) for s in t.stride())
    base = t
    expand = False
    for d in range(t.dim()):
        if stride[d] == 0 and shape[d] > 1:
            base = base.narrow(d, 0, 1)
            expand = True
    perm = None
    exact = True
    if not base.is_contiguous():
        order = sorted(range(base.dim()), key=lambda d: (-base.stride(d), d))
        if base.permute(order).is_contiguous():
            perm = order
            base = base.permute(order)
        else:  # gaps (a slice of a fused q/k/v projection): a dense copy that keeps the memory order
            order = sorted(range(t.dim()), key=lambda d: (-stride[d], d))
            base, exact, expand = t, False, False
            if order != sorted(order):
                perm, base = order, t.permute(order)
    stored = Stored(shape, stride, int(t.storage_offset()), t.dtype, tuple(int(s) for s in base.shape),
                    perm, expand, exact)
    return stored, base


def memory_chunks(view: torch.Tensor):
    """The elements of view in row-major order, as contiguous pieces of at most SPOOL_CHUNK_BYTES where
    rows allow (a dense view is cut anywhere; another one along its first dim)."""
    view = view.detach()
    if view.numel() == 0:
        return
    if view.is_contiguous():
        flat = view.reshape(-1)
        step = max(1, SPOOL_CHUNK_BYTES // view.element_size())
        for i in range(0, flat.numel(), step):
            yield flat[i:i + step]
        return
    if view.dim() == 0 or view.shape[0] == 1:
        yield view.contiguous().reshape(-1)
        return
    row_bytes = max(1, view[0].numel() * view.element_size())
    step = max(1, SPOOL_CHUNK_BYTES // row_bytes)
    for i in range(0, view.shape[0], step):
        yield view[i:i + step].contiguous().reshape(-1)


class Spool:
    """Raw copies of captured tensors on disk (RUN/.capture-spool-PID/), written as they are recorded in
    pieces of SPOOL_CHUNK_BYTES, so that capture never holds the model's tensors in host memory."""

    def __init__(self, root: str):
        self.root = root
        self.n = 0
        os.makedirs(root, exist_ok=True)

    def put(self, view: torch.Tensor, suffix: str = "") -> str:
        """Writes view's elements in row-major order to a new file and returns its path. Raises what the
        copy or the write raises (out of memory, disk full); the file is then gone."""
        path = os.path.join(self.root, f"{self.n}{suffix}.bin")
        self.n += 1
        try:
            with torch.inference_mode(False), torch.no_grad(), open(path, "wb") as f:
                for chunk in memory_chunks(view):
                    f.write(chunk.to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy())
        except BaseException:
            self.remove(path)
            raise
        return path

    @staticmethod
    def remove(path: Optional[str]) -> None:
        if path and os.path.exists(path):
            os.remove(path)

    def close(self) -> None:
        import shutil
        shutil.rmtree(self.root, ignore_errors=True)


def inverse_perm(perm: list) -> list:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


# ---------------------------------------------------------------------------------------------------
# Reference source.


def literal(value, names: dict) -> str:
    """Python source for a constant argument; Slots and variables become their names."""
    from kiln.capture_record import Slot, _Var
    if isinstance(value, Slot):
        return names[value.index]
    if isinstance(value, _Var):
        return value.name
    if isinstance(value, list):
        return "[" + ", ".join(literal(v, names) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(literal(v, names) for v in value)
        return "(" + inner + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, (torch.SymInt,)):
        return repr(int(value))
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, (float, torch.SymFloat)):
        value = float(value)
        if math.isnan(value):
            return "float('nan')"
        if math.isinf(value):
            return "float('inf')" if value > 0 else "float('-inf')"
        return repr(value)
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, torch.dtype):
        return str(value)  # 'torch.float32'
    if isinstance(value, torch.device):
        return "DEVICE"
    if isinstance(value, (torch.layout, torch.memory_format)):
        return str(value)  # 'torch.strided', 'torch.channels_last'
    raise ValueError(f"cannot write a {type(value).__name__} as a constant")


def uses_device(value) -> bool:
    if isinstance(value, torch.device):
        return True
    if isinstance(value, (list, tuple)):
        return any(uses_device(v) for v in value)
    if isinstance(value, dict):
        return any(uses_device(v) for v in value.values())
    return False


def restore_lines(name: str, stored: Stored) -> list:
    """Lines that turn the stored (memory-order) input back into the captured layout."""
    lines = []
    if not stored.exact:
        lines.append(f"# {name}: captured with strides {list(stored.stride)} at storage offset "
                     f"{stored.offset}; received as a dense copy in that memory order")
        if stored.perm is not None:
            lines.append(f"{name} = {name}.permute({', '.join(str(i) for i in inverse_perm(stored.perm))})")
        return lines
    expr = name
    notes = []
    if stored.perm is not None:
        expr += f".permute({', '.join(str(i) for i in inverse_perm(stored.perm))})"
        notes.append("stored in memory order")
    if stored.expand:
        expr += f".expand({', '.join(str(s) for s in stored.shape)})"
        notes.append("broadcast dims stored once")
    if expr != name:
        lines.append(f"{name} = {expr}  # captured strides {list(stored.stride)} ({'; '.join(notes)})")
    return lines


def output_expr(expr: str, stored: Stored) -> str:
    """The returned expression of an output, in the memory order it is stored in."""
    if stored.perm is not None:
        expr = f"{expr}.permute({', '.join(str(i) for i in stored.perm)})"
    return expr if stored.exact else f"{expr}.contiguous()"


def _accessors(struct, base: str) -> list:
    """The expressions of every tensor in a recorded return structure ("T" or nested lists)."""
    if struct == ("str", "T"):
        return [base]
    if isinstance(struct, tuple) and struct and struct[0] in ("L", "U"):
        out = []
        for i, s in enumerate(struct[1]):
            out.extend(_accessors(s, f"{base}[{i}]"))
        return out
    return []


def header(grad_mode: str) -> list:
    lines = ["import torch", "", ""]
    if grad_mode != "grad":
        lines.append("@torch.no_grad()")
    return lines


def aten_reference(sample, input_names: list, kept_outputs: list) -> str:
    """The reference of a captured aten call: one call of the exact overload with the non-tensor
    arguments baked in. input_names: run() parameters (flat tensor args that are not out= buffers);
    kept_outputs: indices of the flat outputs that are problem outputs."""
    names: dict = {}
    body: list = []
    params = []
    for i, (n, is_out) in enumerate(zip(sample.flat_names, sample.flat_is_out)):
        names[i] = n
        if not is_out:
            params.append(n)
    func = sample.func
    need_device = uses_device(sample.struct_args) or uses_device(sample.struct_kwargs) or any(sample.flat_is_out)
    if need_device:
        body.append(f"DEVICE = {params[0]}.device")
    for i, n in enumerate(sample.flat_names):
        st = sample.inputs[i]
        if st is None:
            continue
        body.extend(restore_lines(n, st))
        if sample.flat_mutated[i]:
            body.append(f"{n} = {n}.clone()  # the op writes into it")
    for i, n in enumerate(sample.flat_names):
        if sample.flat_is_out[i]:
            out_meta = sample.out_buffers[i]
            body.append(f"{n} = torch.empty_strided({list(out_meta.shape)}, {list(out_meta.stride)}, "
                        f"dtype={out_meta.dtype}, device=DEVICE)  # out= buffer")
    args = [literal(a, names) for a in sample.struct_args]
    args += [f"{k}={literal(v, names)}" for k, v in sample.struct_kwargs.items()]
    body.append(f"result = torch.ops.{func.namespace}.{func._opname}.{func._overloadname}({', '.join(args)})")
    exprs = _accessors(sample.output_struct, "result")
    rets = [output_expr(exprs[k], sample.outputs[k]) for k in kept_outputs]
    body.append("return " + (rets[0] if len(rets) == 1 else "(" + ", ".join(rets) + ",)"))
    lines = header(sample.grad_mode) + [f"def run({', '.join(params)}):"] + ["    " + b for b in body]
    return "\n".join(lines) + "\n"


def module_reference(trace, kept_outputs: list) -> str:
    """The reference of a traced leaf-module forward: its aten calls as straight-line code."""
    params = [name for name, *_ in trace.inputs]
    body: list = []
    need_device = any(uses_device(a) or uses_device(k) for _, a, k, _, _ in trace.lines)
    if need_device:
        body.append(f"DEVICE = {params[0]}.device")
    for name, _, stored, _ in trace.inputs:
        body.extend(restore_lines(name, stored))
        if name in trace.mutated_inputs:
            body.append(f"{name} = {name}.clone()  # written in place by the module")
    for func, sargs, skwargs, out_names, _ in trace.lines:
        args = [literal(a, {}) for a in sargs] + [f"{k}={literal(v, {})}" for k, v in skwargs.items()]
        call = f"torch.ops.{func.namespace}.{func._opname}.{func._overloadname}({', '.join(args)})"
        if out_names is None:
            body.append(call)
        elif isinstance(out_names, str):
            body.append(f"{out_names} = {call}")
        else:
            lhs = ", ".join(n or "_" for n in out_names)
            body.append(f"{lhs}{',' if len(out_names) == 1 else ''} = {call}")
    rets = [output_expr(trace.outputs[k][0], trace.outputs[k][1]) for k in kept_outputs]
    body.append("return " + (rets[0] if len(rets) == 1 else "(" + ", ".join(rets) + ",)"))
    grad_mode = trace.grad_mode
    lines = header(grad_mode) + [f"def run({', '.join(params)}):"] + ["    " + b for b in body]
    return "\n".join(lines) + "\n"


def module_ops(trace, kept_outputs: list) -> dict:
    """The traced forward as kiln's op chain ("kiln": {"ops": [...], "outputs": [...]}, the form
    src/formats/opchain.h reads): one op per aten call with its arguments ({"ref": NAME} for a tensor,
    NAME an input or an earlier op's "out"), the names and dtypes of its results, and the values the
    problem's outputs are. The same calls as module_reference, as data."""
    from kiln.capture_record import json_arg, op_label
    ops = []
    for func, sargs, skwargs, out_names, out_dtypes in trace.lines:
        op = {"aten": op_label(func), "args": [json_arg(a) for a in sargs]}
        if skwargs:
            op["kwargs"] = {k: json_arg(v) for k, v in skwargs.items()}
        if out_names is not None:
            op["out"] = out_names
            op["dtypes"] = out_dtypes if isinstance(out_dtypes, list) else [out_dtypes]
        ops.append(op)
    return {"ops": ops, "outputs": [trace.outputs[k][0] for k in kept_outputs]}


# ---------------------------------------------------------------------------------------------------
# Names, axes and files.


# The contraction ops whose useful flops capture can count from shapes: name -> (the tensor input whose last
# dimension is contracted, or for a convolution the weight, whose dims after the first are), as in
# 2 x output elements x contracted size. Every other op's flops stay unknown (-1 in the C problem: the
# speed of light is its bytes alone), which is right for memory-bound ops and would be wrong for these.
GEMM_OPERAND = {"mm": 0, "bmm": 0, "matmul": 0, "linear": 0, "addmm": 1, "baddbmm": 1, "addbmm": 1,
                "_grouped_mm": 0, "_scaled_mm": 0, "_scaled_grouped_mm": 0}
CONV_OPS = ("conv1d", "conv2d", "conv3d", "convolution", "_convolution")


def contraction_flops(opname: str, inputs: list, outputs: list, args: Optional[dict] = None) -> Optional[float]:
    """2 x the first output's elements x the contracted size for a GEMM or a convolution (kiln's
    "flops": the speed of light's compute side, with the tensor-core ceiling for bf16/fp16/fp8);
    inputs and outputs: (name, Stored) in the call's order; args: the call's kiln.args (a transposed
    aten::convolution, its 7th argument, is left unknown: its weight's dims are swapped). None for any
    other op."""
    shapes = [tuple(s.shape) for _, s in inputs]
    if not outputs:
        return None
    out = 1
    for d in outputs[0][1].shape:
        out *= int(d)
    if opname in GEMM_OPERAND:
        i = GEMM_OPERAND[opname]
        if i >= len(shapes) or not shapes[i]:
            return None
        return 2.0 * out * int(shapes[i][-1])
    if opname in CONV_OPS:
        positional = (args or {}).get("args") or []
        if opname.endswith("convolution") and (len(positional) < 7 or positional[6] is not False):
            return None
        if len(shapes) < 2 or len(shapes[1]) < 3:
            return None
        k = 1
        for d in shapes[1][1:]:
            k *= int(d)
        return 2.0 * out * k
    return None


def shape_sig(shape) -> str:
    return "x".join(str(s) for s in shape) if len(shape) else "scalar"


def problem_name(stem: str, shapes: list, dtype) -> str:
    """'<stem>_<shape>[_<shape>]_<dtype>' (the first one or two input shapes, the first input's dtype),
    anything but [A-Za-z0-9_] replaced, at most 96 characters."""
    text = f"{stem}_{'_'.join(shape_sig(s) for s in shapes)}_{DTYPE_SHORT.get(dtype, 'x')}"
    text = re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")
    return text[:96]


class Axes:
    """Const axes named by value (`n4096`): a captured problem has one shape; equal sizes share an axis."""

    def __init__(self):
        self.axes: dict = {}

    def shape(self, shape) -> list:
        names = []
        for s in shape:
            name = f"n{int(s)}"
            self.axes.setdefault(name, {"type": "const", "value": int(s)})
            names.append(name)
        return names


SAFETENSORS_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2", torch.int64: "I64", torch.int32: "I32",
    torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL",
}


def write_safetensors(path: str, tensors: dict) -> int:
    """Writes a safetensors file and returns its size. tensors: {name: host tensor, or (raw file, dtype,
    shape) of bytes to copy}; raw files are copied in pieces, so a file bigger than memory can be written (the
    bytes of shape only: a slice is the beginning of a raw file)."""
    import struct
    os.makedirs(os.path.dirname(path), exist_ok=True)
    header, offset, parts = {}, 0, []
    for name in sorted(tensors):
        value = tensors[name]
        if isinstance(value, torch.Tensor):
            value = value.detach().to("cpu").contiguous()
            dtype, shape, n = value.dtype, tuple(value.shape), value.numel() * value.element_size()
        else:
            raw, dtype, shape = value
            n = 1
            for s in shape:
                n *= s
            n *= dtype.itemsize
        header[name] = {"dtype": SAFETENSORS_DTYPES[dtype], "shape": [int(s) for s in shape],
                        "data_offsets": [offset, offset + n]}
        parts.append(value)
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for value in parts:
            if isinstance(value, torch.Tensor):
                if value.numel():  # reshape: a 0-dim tensor cannot be viewed as bytes of another size
                    f.write(value.reshape(-1).view(torch.uint8).numpy())
            else:
                raw, dtype, shape = value
                left = dtype.itemsize
                for s in shape:
                    left *= s
                with open(raw, "rb") as src:
                    while left > 0:
                        chunk = src.read(min(left, SPOOL_CHUNK_BYTES))
                        if not chunk:
                            raise OSError(f"{raw}: shorter than its tensor")
                        f.write(chunk)
                        left -= len(chunk)
    os.replace(tmp, path)
    return os.path.getsize(path)


def random_like(t: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A random tensor with t's statistics: kiln.reference.random_like_stats (the gate's own draw), plus
    two structural rules: a 1-D integer tensor that is sorted (offsets, cumulative counts) stays sorted, and
    a boolean band mask (a causal or sliding window SDPA mask: True takes part) stays that band, as an
    additive mask keeps its masked positions (a kernel built for the band is proved on every set)."""
    from kiln.capture_stats import summarize
    from kiln.reference import random_like_stats
    if t.dtype == torch.bool and t.dim() >= 2:
        structure = summarize(t).get("structure") or {}
        if structure.get("kind") == "band":
            return t.clone()
    drawn = random_like_stats(t, generator)
    if not t.dtype.is_floating_point and t.dtype != torch.bool and t.dim() == 1 and t.numel() > 1:
        if bool((t[1:] >= t[:-1]).all()):
            drawn = torch.sort(drawn).values
    return drawn


def workload_line(key: str, index: int, kind: str, inputs: dict, extra: dict) -> dict:
    """A workload line: its uuid is derived from key (the problem's content hash), index and kind."""
    return {
        "uuid": str(uuid.uuid5(_UUID_NAMESPACE, f"{key}/{index}/{kind}")),
        "axes": {},
        "inputs": inputs,
        "kiln": dict({"set": kind}, **extra),
    }


def safetensors_input(file: str, key: str) -> dict:
    return {"type": "safetensors", "path": file, "tensor_key": key}


def compare(out: torch.Tensor, ref: torch.Tensor) -> dict:
    """How far out is from ref, with the gate's default tolerance of the dtype: {ok, max_abs_err, ...}."""
    if out.shape != ref.shape or out.dtype != ref.dtype:
        return {"ok": False, "why": f"shape/dtype {list(out.shape)} {out.dtype} vs {list(ref.shape)} {ref.dtype}"}
    if not ref.dtype.is_floating_point:
        bad = int((out != ref).sum())
        return {"ok": bad == 0, "n_bad": bad}
    a, b = out.double(), ref.double()
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    if not torch.equal(nan_a, nan_b):
        return {"ok": False, "why": "NaN positions differ"}
    inf_b = torch.isinf(b)
    if not torch.equal(torch.isinf(a), inf_b) or not torch.equal(a[inf_b], b[inf_b]):
        return {"ok": False, "why": "Inf positions differ"}
    fin = ~(nan_b | inf_b)
    a, b = a[fin], b[fin]
    if b.numel() == 0:
        return {"ok": True, "max_abs_err": 0.0}
    atol, rtol = TOLERANCE.get(ref.dtype, (1e-3, 1e-2))
    err = (a - b).abs()
    max_abs = float(err.max())
    n_bad = int((err > atol + rtol * b.abs()).sum())
    return {"ok": n_bad == 0, "max_abs_err": max_abs, "n_bad": n_bad}


def dump_json(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)


REAL_FILE = "tensors/real.safetensors"
SLICES_FILE = "tensors/slices.safetensors"
REAL_OUTPUTS_FILE = "tensors/real_outputs.safetensors"


def write_real_set(problem_dir: str, inputs: list, outputs: Optional[list]) -> tuple:
    """Writes the real set of a problem from the spool: inputs [(name, Stored, mode)] with mode "real"
    (its full copy), "whole_slice" (its slice, which holds every element) or "drawn" (a `random` input
    with its statistics, structure and slice); outputs [(name, Stored)] or None (no real outputs).
    Returns (workload 0's input descriptors, its kiln.drawn, bytes written)."""
    real, slices, descriptors, drawn = {}, {}, {}, {}
    for name, st, mode in inputs:
        if mode == "real":
            real[name] = (st.path, st.dtype, st.data_shape)
            descriptors[name] = safetensors_input(REAL_FILE, name)
        elif mode == "whole_slice":
            real[name] = (st.slice_path, st.dtype, st.data_shape)
            descriptors[name] = safetensors_input(REAL_FILE, name)
        else:
            descriptors[name] = {"type": "random"}
            entry = dict(st.summary)
            if st.slice_path:
                slices[name] = (st.slice_path, st.dtype, (st.slice_elements,))
                entry["slice"] = {"path": SLICES_FILE, "tensor_key": name, "elements": st.slice_elements}
            drawn[name] = entry
    n_bytes = 0
    for file, tensors in ((REAL_FILE, real), (SLICES_FILE, slices),
                          (REAL_OUTPUTS_FILE, {n: (s.path, s.dtype, s.data_shape) for n, s in outputs or []})):
        if tensors or (file == REAL_OUTPUTS_FILE and outputs is not None):
            n_bytes += write_safetensors(os.path.join(problem_dir, file), tensors)
    return descriptors, drawn, n_bytes


def write_random_sets(problem_dir: str, key: str, inputs: list, seeds: list) -> tuple:
    """Random workloads 1..len(seeds): every input drawn like its real full copy (random_like) with the
    seed of its set. Returns (workload lines, bytes written)."""
    lines, n_bytes = [], 0
    for j, seed in enumerate(seeds, start=1):
        gen = torch.Generator().manual_seed(seed)
        file = f"tensors/random{j}.safetensors"
        n_bytes += write_safetensors(os.path.join(problem_dir, file),
                                     {n: random_like(s.load(), gen) for n, s, _ in inputs})
        lines.append(workload_line(key, j, "random", {n: safetensors_input(file, n) for n, _, _ in inputs},
                                   {"seed": seed}))
    return lines, n_bytes


def write_problem_files(problem_dir: str, definition: dict, lines: list) -> None:
    """definition.json and workload.jsonl."""
    dump_json(os.path.join(problem_dir, "definition.json"), definition)
    with open(os.path.join(problem_dir, "workload.jsonl"), "w") as f:
        for line in lines:
            f.write(json.dumps(line, allow_nan=False) + "\n")


def rewrite_workloads(problem_dir: str, keep: int) -> None:
    """Keeps only the first `keep` workloads (and their random files)."""
    path = os.path.join(problem_dir, "workload.jsonl")
    with open(path) as f:
        lines = [line for line in f if line.strip()]
    for line in lines[keep:]:
        obj = json.loads(line)
        for desc in obj["inputs"].values():
            p = os.path.join(problem_dir, desc.get("path") or "")
            if desc.get("path") and os.path.exists(p):
                os.remove(p)
    with open(path, "w") as f:
        f.writelines(lines[:keep])
