"""graph_profile.py: where kiln's graph mode spends its time on the Gemma-4 example (issues 15/16), on the GPU.

    python3 bench/graph_profile.py RUN/library [--seq 4096] [--layers 6] [--rows 14] [--entries A,B|all] [--compile]

With the library `kiln tune examples/gemma4.py` made (RUN/library), the same model and prompt as the example:
wall ms per forward (best of 3 loops of 15) and torch.profiler's top CUDA kernels for eager, dynamo's graphs
as AOTAutograd leaves them without kiln (what graph mode costs by itself), dynamo's own eager backend, kiln in
eager (the library installed) and kiln's graph mode (python/kiln/install_graph.py), with the hits per target
of one graph-mode forward; --compile adds torch.compile's (Inductor) wall time and kernels. The ninth
session's diagnosis in bench/RESULTS.md is this script's output (it ran as .carry/diag.py)."""

import argparse
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(ROOT, "examples")]


def wall_ms(f, n: int = 15) -> float:
    f()
    f()
    torch.cuda.synchronize()
    best = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        torch.cuda.synchronize()
        best.append((time.perf_counter() - t0) / n * 1e3)
    return min(best)


def profile(f, label: str, rows: int = 14) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof
    f()
    torch.cuda.synchronize()
    with prof(activities=[ProfilerActivity.CUDA]) as p:
        f()
        torch.cuda.synchronize()
    print(f"== profile: {label}")
    print(p.key_averages().table(sort_by="cuda_time_total", row_limit=rows, max_name_column_width=60))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("library", help="RUN/library of `kiln tune examples/gemma4.py`")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--rows", type=int, default=14, help="kernels per profile table (default 14)")
    ap.add_argument("--entries", default=None,
                    help="the library's entries to install: a comma-separated list of names, or all (default: "
                         "what kiln tune decided, as kiln.install picks)")
    ap.add_argument("--compile", action="store_true",
                    help="also torch.compile (Inductor, default mode): its wall time and kernels, to set beside graph "
                         "mode's")
    args = ap.parse_args()
    entries = args.entries if args.entries in (None, "all") else [e for e in args.entries.split(",") if e]
    if not torch.cuda.is_available():
        sys.exit("graph_profile.py: needs a GPU")
    import gemma4
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from transformers import AutoModelForCausalLM

    import kiln
    torch.backends.cuda.matmul.allow_tf32 = True  # as the example runs
    torch.manual_seed(0)
    config = gemma4.build_config(False, args.layers)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").to(torch.bfloat16).cuda().eval()
    ids = torch.randint(0, config.vocab_size, (1, args.seq), device="cuda")
    with torch.inference_mode():
        def fwd(m):
            return lambda: m(ids)
        print("eager", wall_ms(fwd(model)))
        profile(fwd(model), "eager")
        plain = torch.compile(model, backend=aot_autograd(fw_compiler=lambda gm, _: make_boxed_func(gm.forward)))
        print("aot plain", wall_ms(fwd(plain)))
        profile(fwd(plain), "aot plain")
        torch._dynamo.reset()
        print("dynamo eager backend", wall_ms(fwd(torch.compile(model, backend="eager"))))
        torch._dynamo.reset()
        inst = kiln.install(args.library, model=model, entries=entries)
        print(inst.line())
        print("kiln eager", wall_ms(fwd(model)))
        kiln.uninstall()
        torch._dynamo.reset()
        # graph mode as `kiln run --graph` installs it: module entries are patterns of their calls there
        inst = kiln.install(args.library, model=model, compile="graph", entries=entries)
        print("kiln graph", wall_ms(fwd(model)))
        inst.reset_stats()
        structures = getattr(inst._inductor, "structures", None)  # the mask checks (install_assumes)
        checks = structures.checks if structures is not None else 0
        model(ids)
        stats = inst.stats()
        print("graph mode hits per forward", stats["hits"], "misses", stats["misses"],
              {t: c["hits"] for t, c in stats["targets"].items() if c["hits"]},
              "mask checks", (structures.checks - checks) if structures is not None else "-")
        profile(fwd(model), "kiln graph", args.rows)
        kiln.uninstall()
        if args.compile:
            torch._dynamo.reset()
            comp = torch.compile(model)
            print("torch.compile", wall_ms(fwd(comp)))
            profile(fwd(comp), "torch.compile", args.rows)


if __name__ == "__main__":
    main()
