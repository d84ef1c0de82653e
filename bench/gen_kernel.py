"""gen_kernel.py: one generated CUDA candidate (`kiln sweep --out DIR` writes them; `.cu` with its
`// kiln: launch` line) run outside the gate on a problem's largest workload: compiled with nvcc for sm_90a,
launched through the driver API with its grid, block, dynamic shared memory and cluster, checked against the
problem's reference and timed like the gate (L2 flushed, CUDA events, median). It is a diagnostic: run it under
`ncu -k ENTRY -c 1` to see why a point is slow (the gate's sandbox is not in the way); the gate stays what
proves and times. Any family's candidate runs: the entry point and its launch come from the launch line, the
integer parameters from the source's constants or the workload's axes, the tensor maps from its
`// kiln: tensormap` lines.

    python3 bench/gen_kernel.py PROBLEM_DIR KERNEL.cu [KERNEL.cu ...] [--reps N] [--diag]

Prints one line per kernel: median µs, grid, block, cluster, the largest absolute error against the reference,
and the point's parameters; --diag adds where the errors are (rows and columns of the last two dims of each
output, and how many elements). Kernels that take kiln's scratch buffer get 256 MiB of zeros."""
import argparse
import ctypes
import os
import re
import statistics
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from kiln.reference import load_problem, load_reference, materialize_inputs  # noqa: E402

from torch_problem import numel  # noqa: E402


class LaunchAttr(ctypes.Structure):  # CUlaunchAttribute with a cluster dimension value
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_int), ("x", ctypes.c_uint), ("y", ctypes.c_uint),
                ("z", ctypes.c_uint), ("rest", ctypes.c_char * 52)]


class LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("gx", ctypes.c_uint), ("gy", ctypes.c_uint), ("gz", ctypes.c_uint), ("bx", ctypes.c_uint),
                ("by", ctypes.c_uint), ("bz", ctypes.c_uint), ("smem", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttr)), ("n_attrs", ctypes.c_uint)]


CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
# CUtensorMapDataType by element (TMA moves bits: other 1-byte types go as UINT8), CUtensorMapSwizzle by bytes
TMAP_TYPES = {torch.bfloat16: 9, torch.float16: 6, torch.float32: 7, torch.float64: 8, torch.int64: 5,
              torch.int32: 3, torch.int16: 1}
TMAP_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}


def tensor_maps(src, tensors, env, cu, keep):
    """The source's `// kiln: tensormap` lines (docs/abi.md section 2) encoded for these tensors, in order: each a
    64-byte aligned 128-byte buffer, kept alive in keep."""
    maps = []
    for m in re.finditer(r"^// kiln: tensormap (\w+) (.*)$", src, re.M):
        t = tensors[m.group(1)]
        kv = dict(x.split("=", 1) for x in m.group(2).split())
        tup = lambda v: [int(x) for x in (eval(v, env) if isinstance(eval(v, env), tuple) else (eval(v, env),))]
        dims, box = tup(kv["dims"]), tup(kv["box"])
        strides = [x * t.element_size() for x in tup(kv["strides"])] if "strides" in kv else []
        raw = (ctypes.c_uint8 * 192)()
        addr = (ctypes.addressof(raw) + 63) & ~63
        keep.append(raw)
        r = cu.cuTensorMapEncodeTiled(
            ctypes.c_void_p(addr), TMAP_TYPES.get(t.dtype, 0), len(dims), ctypes.c_void_p(t.data_ptr()),
            (ctypes.c_uint64 * len(dims))(*dims), (ctypes.c_uint64 * max(1, len(strides)))(*strides),
            (ctypes.c_uint32 * len(box))(*box), (ctypes.c_uint32 * len(box))(*[1] * len(box)), 0,
            TMAP_SWIZZLE[int(kv.get("swizzle", "0"))], 3, 0)
        assert r == 0, f"cuTensorMapEncodeTiled({m.group(0)}): CUresult {r}"
        maps.append(ctypes.c_void_p(addr))
    return maps
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


def dim3(v):
    v = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    return tuple(int(x) for x in v) + (1,) * (3 - len(v))


def run_kernel(path, tensors, axes, cu, reps):
    src = open(path).read()
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", "-std=c++17", "-include", "cstdint", "-o", cubin,
                        path], check=True)
        image = open(cubin, "rb").read()
    consts = {m.group(1): int(m.group(2)) for m in re.finditer(r"constexpr int64_t (\w+) = (-?\d+);", src)}
    line = re.search(r"// kiln: launch (\w+) (.*)", src)
    entry = line.group(1)
    launch = dict(kv.split("=", 1) for kv in line.group(2).split())
    env = dict(axes, **consts, min=min, max=max, ceil_div=lambda a, b: -(-a // b))
    # the directive's integer expressions
    grid, block = dim3(eval(launch["grid"], env)), dim3(eval(launch.get("block", "1"), env))
    smem = int(eval(launch.get("smem", "0"), env))
    cluster = int(launch.get("cluster", "1"))
    sig = re.search(entry + r"\((.*?)\)\s*\{", src, re.S).group(1)
    keep, args = [], []
    for param in (p.strip() for p in sig.split(",")):
        name = param.split()[-1].lstrip("*")
        if "kiln_tensormap" in param:
            continue  # the maps follow the ABI's parameters
        if "*" in param:
            t = tensors[name] if name != "kiln_scratch" else torch.zeros(256 << 20, dtype=torch.uint8,
                                                                             device="cuda")
            keep.append(t)
            args.append(ctypes.c_void_p(t.data_ptr()))
        else:
            args.append(ctypes.c_int64(consts[name] if name in consts else axes[name]))
    ptrs = [ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args]
    ptrs += tensor_maps(src, tensors, env, cu, keep)
    argv = (ctypes.c_void_p * len(ptrs))(*ptrs)
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    assert cu.cuModuleLoadData(ctypes.byref(mod), image) == 0, "cuModuleLoadData failed"
    assert cu.cuModuleGetFunction(ctypes.byref(fn), mod, entry.encode()) == 0
    if smem > 48 * 1024:
        assert cu.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem) == 0
    attr = LaunchAttr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, 0, cluster, 1, 1)
    cfg = LaunchConfig(*grid, *block, smem, None, ctypes.pointer(attr), 1 if cluster > 1 else 0)

    def launch_once():
        r = cu.cuLaunchKernelEx(ctypes.byref(cfg), fn, argv, None)
        assert r == 0, f"cuLaunchKernelEx: CUresult {r}"

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    launch_once()
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        flush.fill_(i & 255)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        launch_once()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    cu.cuModuleUnload(mod)
    params = re.search(r"// params: (.*)", src)
    return statistics.median(times), grid, block, cluster, params.group(1) if params else ""


def diag(name, out, expected):
    """Where out differs from expected beyond bf16's tolerance: the rows and columns of its last two dims."""
    o, e = out.float(), expected.float()
    bad = (o - e).abs() > 0.02 + 0.02 * e.abs()
    if bad.dim() < 2:
        bad, o, e = bad.reshape(1, -1), o.reshape(1, -1), e.reshape(1, -1)
    bad2 = bad.reshape(-1, bad.shape[-1])
    rows = bad2.any(dim=1).nonzero().flatten().tolist()
    cols = bad2.any(dim=0).nonzero().flatten().tolist()
    print(f"  {name}: {int(bad.sum())} of {bad.numel()} elements off; rows {len(rows)} of {bad2.shape[0]} "
          f"(first {rows[:12]}), columns {len(cols)} of {bad2.shape[1]} (first {cols[:12]}); "
          f"zeros in out {int((o == 0).sum())}, in expected {int((e == 0).sum())}", flush=True)
    if rows:
        r = rows[0]
        print(f"  row {r}: out {o.reshape(-1, o.shape[-1])[r, :8].tolist()}\n"
              f"  row {r}: exp {e.reshape(-1, e.shape[-1])[r, :8].tolist()}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problem")
    ap.add_argument("kernels", nargs="+")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--diag", action="store_true", help="where the errors are")
    a = ap.parse_args()
    problem = load_problem(a.problem)
    ref = load_reference(problem)
    wl = max(problem.workloads, key=lambda w: sum(
        numel(problem, w, s) for s in list(problem.inputs.values()) + list(problem.outputs.values())
        if s.shape is not None))
    inputs = materialize_inputs(problem, wl, device="cuda", seed=0, reference=ref)
    with torch.inference_mode():
        expected = ref.run(*inputs.values())
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    cu = ctypes.CDLL("libcuda.so.1")
    for path in a.kernels:
        outs = {name: torch.empty_like(e) for name, e in zip(problem.outputs, expected)}
        try:
            us, grid, block, cluster, params = run_kernel(path, {**inputs, **outs}, dict(wl.axes), cu, a.reps)
            err = max((o.float() - e.float()).abs().max().item() for o, e in zip(outs.values(), expected))
            print(f"{os.path.basename(path)} {us:9.1f} us  grid {grid} block {block} cluster {cluster}  "
                  f"max abs err {err:.3g}  {params}", flush=True)
            if a.diag:
                for name, o, e in zip(outs, outs.values(), expected):
                    diag(name, o, e)
        except Exception as e:  # one kernel's failure is a line, not the end of the list
            print(f"{os.path.basename(path)} failed: {type(e).__name__}: {e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
