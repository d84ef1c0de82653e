"""torch_problem.py: PyTorch's own time on a kiln problem directory: the definition's reference run() in
eager mode and under torch.compile (default and max-autotune-no-cudagraphs), on the largest workload, timed
like kiln's gate (L2 flushed before each run, CUDA events, median of 30 after warm-up). One JSON line per
problem on stdout. Usage: python3 bench/torch_problem.py PROBLEM_DIR... [--modes eager,default,...]"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from kiln.reference import load_problem, load_reference, materialize_inputs  # noqa: E402


def numel(problem, workload, spec):
    n = 1
    for d in workload_shape(problem, workload, spec):
        n *= d
    return n


def workload_shape(problem, workload, spec):
    return tuple(workload.axes[a] if a in workload.axes else int(a) for a in (spec.shape or ()))


def time_us(fn, args, iters=30, warmup=3):
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    with torch.inference_mode():
        for _ in range(warmup):
            fn(*args)
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            flush.zero_()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(*args)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problems", nargs="+")
    ap.add_argument("--modes", default="eager,default,max-autotune-no-cudagraphs")
    args = ap.parse_args()
    for pdir in args.problems:
        row = {"problem": os.path.basename(os.path.normpath(pdir))}
        t_row = time.monotonic()
        try:
            problem = load_problem(pdir)
            ref = load_reference(problem)
            # the workload that moves the most bytes: the one the bench tables quote
            wl = max(problem.workloads, key=lambda w: sum(
                numel(problem, w, s) for s in list(problem.inputs.values()) + list(problem.outputs.values())
                if s.shape is not None))
            row["workload"] = wl.uuid
            row["axes"] = dict(wl.axes)
            inputs = materialize_inputs(problem, wl, device="cuda", seed=0, reference=ref)
            call_args = list(inputs.values())
            try:
                # the practical floor at this size: a plain device copy that moves the same bytes (read
                # inputs + write outputs), timed the same way: launch, ramp-up and tail included
                moved = sum(t.numel() * t.element_size() for t in call_args if torch.is_tensor(t))
                with torch.inference_mode():
                    outs = ref.run(*call_args)
                for t in outs if isinstance(outs, (tuple, list)) else [outs]:
                    moved += t.numel() * t.element_size() if torch.is_tensor(t) else 0
                n = max(1, moved // 8)  # float32 elements per side: n*4 read + n*4 written
                src = torch.empty(n, dtype=torch.float32, device="cuda")
                dst = torch.empty_like(src)
                row["copy_bytes"] = 8 * n
                row["copy_us"] = round(time_us(lambda: dst.copy_(src), []), 2)
                del src, dst, outs
            except Exception as e:  # the floor is a diagnostic: never lose the row for it
                row["copy_error"] = f"{type(e).__name__}: {str(e)[:200]}"
            for mode in args.modes.split(","):
                t_mode = time.monotonic()
                fn = ref.run if mode == "eager" else torch.compile(
                    ref.run, mode=None if mode == "default" else mode)
                try:
                    row[mode + "_us"] = round(time_us(fn, call_args), 2)
                except Exception as e:  # a compile failure is a figure too
                    row[mode + "_us"] = None
                    row[mode + "_error"] = f"{type(e).__name__}: {str(e)[:200]}"
                row[mode + "_s"] = round(time.monotonic() - t_mode, 1)  # compile + timing: a run's cost
                torch._dynamo.reset()
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        row["wall_s"] = round(time.monotonic() - t_row, 1)
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
