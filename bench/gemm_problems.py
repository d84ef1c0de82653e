"""gemm_problems.py: the GEMM problems of one `kiln capture` run, one path a line, largest first (by the flops
capture recorded, else by share): a captured aten GEMM (linear, mm, matmul, bmm, addmm, baddbmm, _scaled_mm), a
convolution with a 1x1 kernel (a GEMM over its channels where its stride is 1: the families say when not), or a
chain whose pattern is a GEMM with what follows it (gemm_epilogue, gemm_gated). Capture writes one problem per op
signature, so a shape appears once. bench/gemm_examples_device.sh sweeps them.

    python3 bench/gemm_problems.py RUN_DIR
"""
import json
import pathlib
import sys

GEMM_OPS = {"aten::linear.default", "aten::mm.default", "aten::matmul.default", "aten::bmm.default",
            "aten::addmm.default", "aten::baddbmm.default", "aten::_scaled_mm.default"}
GEMM_PATTERNS = {"gemm_epilogue", "gemm_gated"}
CONV_OPS = {"aten::conv2d.default", "aten::convolution.default"}


def one_by_one(definition: dict) -> bool:
    """The convolution's weight (its second input) has a 1x1 kernel."""
    inputs = list(definition.get("inputs", {}).values())
    axes = definition.get("axes", {})
    if len(inputs) < 2 or len(inputs[1].get("shape") or []) != 4:
        return False
    size = [axes.get(a, {}).get("value") if isinstance(a, str) else a for a in inputs[1]["shape"]]
    return sorted(size)[:2] == [1, 1] and size.count(1) >= 2


def gemm_problems(run: pathlib.Path) -> list:
    """(flops or -1, share, path) of run's GEMM problems."""
    found = []
    for d in sorted((run / "problems").iterdir()):
        try:
            definition = json.loads((d / "definition.json").read_text())
        except (OSError, ValueError):
            continue
        k = definition.get("kiln") or {}
        if k.get("aten") in GEMM_OPS or k.get("pattern") in GEMM_PATTERNS or \
                (k.get("aten") in CONV_OPS and one_by_one(definition)):
            found.append((float(k.get("flops") or -1), float(k.get("share") or 0), d))
    return found


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) == 2 else 2)
    run = pathlib.Path(sys.argv[1])
    if not (run / "problems").is_dir():
        sys.exit(f"gemm_problems.py: {run} has no problems/ (not a kiln capture run)")
    for _, _, d in sorted(gemm_problems(run), key=lambda x: (-x[0], -x[1], str(x[2]))):
        print(d)


if __name__ == "__main__":
    main()
