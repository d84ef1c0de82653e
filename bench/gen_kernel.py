"""gen_kernel.py: one generated CUDA candidate (`kiln sweep --out DIR` writes them; `.cu` with its
`// kiln: launch` line) run outside the gate on a problem's largest workload: compiled with nvcc for sm_90a,
launched through the driver API with its grid, block and cluster, checked against the problem's reference and
timed like the gate (L2 flushed, CUDA events, median). It is a diagnostic: run it under `ncu -k kg_kernel -c 1`
to see why a point is slow (the gate's sandbox is not in the way); the gate stays what proves and times.

    python3 bench/gen_kernel.py PROBLEM_DIR KERNEL.cu [KERNEL.cu ...] [--reps N]

Prints one line per kernel: median µs, grid, block, cluster, the largest absolute error against the reference,
and the point's parameters. Kernels that take kiln's scratch buffer get 256 MiB of zeros."""
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


def run_kernel(path, tensors, cu, reps):
    src = open(path).read()
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", "-std=c++17", "-include", "cstdint", "-o", cubin,
                        path], check=True)
        image = open(cubin, "rb").read()
    consts = {m.group(1): int(m.group(2)) for m in re.finditer(r"constexpr int64_t (\w+) = (-?\d+);", src)}
    launch = dict(kv.split("=", 1) for kv in re.search(r"// kiln: launch kg_kernel (.*)", src).group(1).split())
    env = dict(consts, min=min, max=max, ceil_div=lambda a, b: -(-a // b))
    grid, block = eval(launch["grid"], env), eval(launch["block"], env)  # the directive's integer expressions
    cluster = int(launch.get("cluster", "1"))
    sig = re.search(r"kg_kernel\((.*?)\)\s*\{", src, re.S).group(1)
    keep, args = [], []
    for param in (p.strip() for p in sig.split(",")):
        name = param.split()[-1].lstrip("*")
        if "*" in param:
            t = tensors[name] if name != "kiln_scratch" else torch.zeros(256 << 20, dtype=torch.uint8,
                                                                             device="cuda")
            keep.append(t)
            args.append(ctypes.c_void_p(t.data_ptr()))
        else:
            args.append(ctypes.c_int64(consts[name]))
    argv = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    assert cu.cuModuleLoadData(ctypes.byref(mod), image) == 0, "cuModuleLoadData failed"
    assert cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"kg_kernel") == 0
    attr = LaunchAttr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, 0, cluster, 1, 1)
    cfg = LaunchConfig(grid, 1, 1, block, 1, 1, 0, None, ctypes.pointer(attr), 1 if cluster > 1 else 0)

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problem")
    ap.add_argument("kernels", nargs="+")
    ap.add_argument("--reps", type=int, default=30)
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
            us, grid, block, cluster, params = run_kernel(path, {**inputs, **outs}, cu, a.reps)
            err = max((o.float() - e.float()).abs().max().item() for o, e in zip(outs.values(), expected))
            print(f"{os.path.basename(path)} {us:9.1f} us  grid {grid} block {block} cluster {cluster}  "
                  f"max abs err {err:.3g}  {params}", flush=True)
        except Exception as e:  # one kernel's failure is a line, not the end of the list
            print(f"{os.path.basename(path)} failed: {type(e).__name__}: {e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
