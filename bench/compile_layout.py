"""compile_layout.py: kiln + torch.compile on a convolutional network, with and without kiln's one-pass entries on
4-D tensors in graphs whose convolutions Inductor lays out channels-last (python/kiln/install_inductor.py,
`_relaid_match`).

    python3 bench/compile_layout.py RUN/library [--model densenet121] [--dtype bf16] [--batch 32] [--rounds 7]
                                    [--entries all] [--no-rule-off]

RUN/library is what `kiln tune examples/resnet50.py -- --model M --dtype D` wrote (its install.json decides the
entries, as kiln.install picks them), or what `kiln optimize` wrote with `--entries all`. The same torchvision
model and input as examples/resnet50.py, in inference mode. Three ways, each compiled and timed in turn (one
installation at a time), its rounds (loops of about a second) alternating with eager's: torch.compile, kiln +
torch.compile as installed now (those entries left to Inductor), and kiln + torch.compile with every entry
replaced wherever it matches (the rule switched off: the behaviour before 2026-12-06; --no-rule-off leaves it
out). Prints per way the median ms a forward and the spread of its rounds ((max - min) / median), eager's beside
it, kiln's hits a forward and the largest difference from eager's output; the table last."""

import argparse
import os
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))


def per_call_ms(f, n: int) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        f()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("library", help="RUN/library of `kiln tune examples/resnet50.py -- --model M --dtype D`")
    ap.add_argument("--model", default="densenet121", help="a torchvision.models builder (default densenet121)")
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=7, help="alternating rounds (default 7)")
    ap.add_argument("--entries", default=None,
                    help="all: every entry of the library's manifest (a library `kiln optimize` wrote, with no "
                         "install.json); default: what install.json decided, as kiln.install picks")
    ap.add_argument("--no-rule-off", action="store_true", help="leave out the way with the rule switched off")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("compile_layout.py: needs a GPU (Inductor's layout choice is the GPU's)")
    import torchvision

    import kiln
    import kiln.install_inductor as ii

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    torch.backends.cuda.matmul.allow_tf32 = True  # as examples/resnet50.py
    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)().to(dtype).cuda().eval()
    x = torch.randn(args.batch, 3, 224, 224, dtype=dtype, device="cuda")
    entries = None
    if args.entries == "all":
        import json
        with open(os.path.join(args.library, "manifest.json")) as f:
            entries = [e["problem"] for e in json.load(f)["entries"]]
    relaid = ii._relaid_layout
    eager = lambda: model(x)  # noqa: E731
    rows = []
    with torch.inference_mode():
        want = model(x)
        n = max(3, int(1.0 / max(per_call_ms(eager, 3) / 1e3, 1e-4)))
        ways = [("torch.compile", None), ("kiln + compile", True), ("kiln + compile, rule off", False)]
        for name, rule in ways[:2] if args.no_rule_off else ways:
            torch._dynamo.reset()  # nothing compiled for another way may be reused
            ii._relaid_layout = relaid if rule is not False else (lambda graph: False)
            inst = kiln.install(args.library, model, entries=entries, compile=False) if rule is not None else None
            try:
                compiled = torch.compile(model)
                t0 = time.perf_counter()
                got = compiled(x)
                compiled(x)
                warm_s = time.perf_counter() - t0
                hits = left = "-"
                if inst is not None:
                    inst.reset_stats()
                    compiled(x)
                    hits = inst.stats()["hits"]
                    left = sum(ii.LEFT_TO_INDUCTOR in note for note in inst.notes)
                mine, base = [], []
                for _ in range(args.rounds):  # alternating with eager, which every block times (the drift)
                    base.append(per_call_ms(eager, n))
                    mine.append(per_call_ms(lambda: compiled(x), n))
            finally:
                if inst is not None:
                    kiln.uninstall(inst)
                ii._relaid_layout = relaid
                torch._dynamo.reset()  # the graphs call ops that uninstall removed
            row = (name, statistics.median(mine), spread(mine), statistics.median(base), spread(base), hits, left,
                   (got.float() - want.float()).abs().max().item(), warm_s)
            print(row, flush=True)
            rows.append(row)
    print(f"\n{args.model} {args.dtype} batch {args.batch}, {torch.cuda.get_device_name()}: per way, {args.rounds} "
          f"rounds of {n} forwards alternating with eager's")
    print("| way | ms a forward | spread % | eager beside it, ms | eager spread % | x eager | kiln hits a forward | "
          "entries left to Inductor | max abs diff | compile + 2 forwards, s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, ms, sp, e_ms, e_sp, hits, left, diff, warm_s in rows:
        print(f"| {name} | {ms:.3f} | {sp:.1f} | {e_ms:.3f} | {e_sp:.1f} | {e_ms / ms:.2f} | {hits} | {left} | "
              f"{diff:.3g} | {warm_s:.0f} |")


def spread(ts: list) -> float:
    return 100 * (max(ts) - min(ts)) / statistics.median(ts)


if __name__ == "__main__":
    main()
