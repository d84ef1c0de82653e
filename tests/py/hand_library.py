"""A cpu library of one aten entry (softmax over rows) whose kernel is written here, for the tests that need a
library without a search: a captured problem and the manifest libkiln_rt reads (docs/library.md). With
scratch=True the entry has 16 bytes of scratch memory and its kernel checks the runtime's contract that every
launch gets it zeroed: it marks the buffer and writes NaN when it finds it marked."""

import json
import os
import textwrap

SOFTMAX_SCRIPT = textwrap.dedent("""
    import torch
    x = torch.randn(64, 256)
    with torch.no_grad():
        for _ in range(2):
            torch.softmax(x, dim=-1)
""")

# the rows' loop, after a line that defines `bad` (0, or NaN where a check of the kernel's failed)
SOFTMAX_BODY = """
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; c++) m = fmaxf(m, xr[c]);
        double sum = 0.0;
        for (int64_t c = 0; c < cols; c++) { float e = expf(xr[c] - m); yr[c] = e; sum += e; }
        for (int64_t c = 0; c < cols; c++) yr[c] = (float)(yr[c] / sum) + bad;
    }
}
"""
SOFTMAX_C = ("// kiln: launch softmax_rows\n"
             "void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {\n"
             "    const float bad = 0.0f;" + SOFTMAX_BODY)
SOFTMAX_SCRATCH_C = ("// kiln: launch softmax_rows\n"
                     "void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols, void *kiln_scratch) {\n"
                     "    int *seen = (int *)kiln_scratch;\n"
                     "    const float bad = seen[0] ? NAN : 0.0f;\n"
                     "    seen[0] = 1;" + SOFTMAX_BODY)


def softmax_library(tmp_path, scratch: bool = False) -> str:
    """RUN/library under tmp_path: the softmax of SOFTMAX_SCRIPT captured on the cpu, one entry, its kernel
    SOFTMAX_C (or SOFTMAX_SCRATCH_C); the library's path."""
    return hand_library(tmp_path, SOFTMAX_SCRIPT, "softmax", SOFTMAX_SCRATCH_C if scratch else SOFTMAX_C,
                        "softmax_rows", scratch_bytes=16 if scratch else 0)


def hand_library(tmp_path, script_text: str, prefix: str, kernel_c: str, fn: str,
                 scratch_bytes: int = 0) -> str:
    """RUN/library under tmp_path: script_text captured on the cpu (no reference data), and one aten entry for
    its problem whose name starts with prefix, with kernel_c (launching fn: float inputs, float outputs,
    int64 axes, then the scratch pointer if scratch_bytes) as its kernel; the library's path."""
    import kiln
    from kiln.capture import main as capture_main
    script = tmp_path / "script.py"
    script.write_text(script_text)
    run = tmp_path / "run"
    assert capture_main([str(script), "--out", str(run), "--device", "cpu", "--no-reference"]) == 0
    (name,) = [n for n in os.listdir(run / "problems") if n.startswith(prefix)]
    d = json.loads((run / "problems" / name / "definition.json").read_text())
    k = d["kiln"]
    lib = run / "library"
    lib.mkdir()
    (lib / f"{name}.c").write_text(kernel_c)

    def gate_tensor(n, spec):
        return {"name": n, "dtype": spec["dtype"], "shape": k["shapes"][n], "strides": k["strides"][n],
                "storage_offset": k["storage_offsets"][n], "layout": k["layouts"][n]}

    params = [f"const float* {n}" for n in d["inputs"]] + [f"float* {n}" for n in d["outputs"]]
    params += [f"int64_t {a}" for a in d["axes"]]
    if scratch_bytes:
        params.append("void* kiln_scratch")
    entry = {
        "problem": name, "kind": "aten", "aten": k["aten"],
        "gate": {"inputs": [gate_tensor(n, s) for n, s in d["inputs"].items()],
                 "outputs": [gate_tensor(n, s) for n, s in d["outputs"].items()],
                 "args": k["args"], "grad_mode": k["grad_mode"], "device_capability": "0.0",
                 **({"dropped_outputs": k["dropped_outputs"]} if "dropped_outputs" in k else {})},
        "kernel": f"{name}.c", "signature": f"void {fn}({', '.join(params)})",
        "launches": [{"workloads": [0], "axes": {a: v["value"] for a, v in d["axes"].items()},
                      "launches": [{"entry": fn, "grid": [1, 1, 1], "block": [1, 1, 1],
                                    "cluster": [1, 1, 1], "smem_bytes": 0}], "scratch_bytes": scratch_bytes}],
        "time_us": {"kiln": None, "eager": None}, "speedup": None,
    }
    if scratch_bytes:
        entry["scratch_bytes"] = str(scratch_bytes)
    manifest = {"kiln_library": 1, "backend": "cpu", "device": {"name": "", "uuid": "", "compute_capability": "0.0"},
                "build": {"kiln": kiln.__version__, "nvrtc": None}, "entries": [entry]}
    (lib / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return str(lib)
