"""Runs emitted attention candidates on a GPU outside kiln's gate, for a machine where kiln itself is not
built: each `NAME/*.cu` under SRC (written by `kiln sweep --backend cuda --out SRC/NAME`, whose problem is
PROBLEMS/NAME) is compiled with nvcc for sm_90a (but one with `// kiln: tensormap` lines or a paged one: the
gate's figure stands for it), launched by its `// kiln: launch` line with the problem's
make_inputs on the GPU, compared with the problem's reference run() (the gate's default tolerance of the
output dtype) and timed with CUDA events; for the bench rows (`"kiln": {"bench"}`) torch's SDPA backends
and eager are timed on the same inputs. One JSON line per candidate and per baseline on stdout, then a table.

    python3 bench/attention_check.py SRC PROBLEMS [--iters N]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import pathlib
import re
import subprocess
import sys

import numpy as np
import torch

TOL = {torch.bfloat16: (1e-2, 2e-2, 1e-2), torch.float16: (1e-3, 1e-2, 2e-3), torch.float32: (1e-5, 1e-4, 1e-5)}


def ceil_div(a, b):
    return -(-a // b)


def ev(expr: str, axes: dict) -> int:
    return int(eval(expr.replace("/", "//").replace("////", "//"), {"ceil_div": ceil_div, "min": min, "max": max}, dict(axes)))


def top_level(s: str) -> list:
    """The comma-separated parts of s outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in s:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return parts + [cur]


def launch_of(src: str, axes: dict):
    m = re.search(r"// kiln: launch attention_kernel grid=(\S+) block=(\S+)(?: smem=(\S+))?", src)
    grid = m.group(1)
    grid = tuple(ev(g, axes) for g in top_level(grid[1:-1])) if grid.startswith("(") else (ev(grid, axes), 1, 1)
    return grid, (ev(m.group(2), axes), 1, 1), ev(m.group(3), axes) if m.group(3) else 0


def params_of(src: str) -> list:
    m = re.search(r'extern "C" __global__ void .*?attention_kernel\(([^)]*)\)', src)
    return [p.strip().split()[-1].lstrip("*") for p in m.group(1).split(",")]


def load_problem(d: pathlib.Path):
    definition = json.loads((d / "definition.json").read_text())
    ns: dict = {}
    exec(definition["reference"], ns)
    workloads = [json.loads(line) for line in (d / "workload.jsonl").read_text().splitlines() if line.strip()]
    return definition, ns, workloads


def time_us(fn, iters: int) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000)
    return float(np.median(times))


def paged_dense(definition, inputs):
    """A paged row's q, k and v as SDPA takes them: [seqs, heads, tokens, d], the keys of each sequence
    gathered through its pages in order (every sequence `tokens` long, its pages full)."""
    paged = definition["kiln"]["bench"]["paged"]
    n, t = paged["seqs"], paged["tokens"]
    q = inputs["q"].view(n, t, *inputs["q"].shape[1:]).transpose(1, 2)
    kv = []
    for cache in (inputs["k_cache"], inputs["v_cache"]):
        pages = cache[inputs["kv_indices"].long()]  # [pages, page_size, hkv, d], in sequence order
        kv.append(pages.reshape(n, t, *cache.shape[2:]).transpose(1, 2).contiguous())
    return q.contiguous(), kv[0], kv[1]


def flops(definition, inputs) -> float:
    if "paged" in definition.get("kiln", {}).get("bench", {}):
        q, k, _ = paged_dense(definition, inputs)
        inputs = {"q": q, "k": k}
    q, k = inputs["q"], inputs["k"]
    b, h, sq, d = q.shape
    skv = k.shape[2]
    bench = definition.get("kiln", {}).get("bench", {})
    kept = sq * skv
    if bench.get("mask") == "causal":
        kept = sum(min(i + 1, skv) for i in range(sq))
    elif bench.get("mask") == "window":
        w = bench["window"]
        kept = sum(min(i + 1, w) for i in range(sq))
    return 4.0 * b * h * d * kept


def baselines(definition, ns, inputs, iters):
    """Eager (the reference) and each SDPA backend on the same inputs, the mask as SDPA takes it."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    bench = definition["kiln"]["bench"]
    if "paged" in bench:  # SDPA over the same keys gathered contiguous (the gather is not timed)
        q, k, v = paged_dense(definition, inputs)
    else:
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
    kw = {"enable_gqa": q.shape[1] != k.shape[1]}
    if bench["mask"] == "causal":
        kw["is_causal"] = True
    elif bench["mask"] == "window":
        i = torch.arange(q.shape[2], device=q.device)
        rel = i[None, :] - i[:, None]
        kw["attn_mask"] = ((rel <= 0) & (rel > -bench["window"]))[None, None]
    elif bench["mask"] == "tensor":  # the row's own mask input, as its reference passes it
        kw["attn_mask"] = inputs["mask"]
    if definition["kiln"].get("kind") == "chain":
        kw["scale"] = definition["kiln"]["ops"][[o["aten"] for o in definition["kiln"]["ops"]].index("aten::mul.Tensor")]["args"][1]
    out = {"eager": time_us(lambda: ns["run"](**inputs), iters)}
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel([be]):
                out[name] = time_us(lambda: F.scaled_dot_product_attention(q, k, v, **kw), iters)
        except Exception as e:  # a backend that refuses the shape or the mask
            out[name] = None
            out[name + "_why"] = str(e).splitlines()[0][:120]
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("problems")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--per-row", type=int, default=0, help="re-run at most this many candidates a row (0: all)")
    ap.add_argument("--sweep", help="the sweeps' --jsonl files (NAME.jsonl): a row's candidates the gate timed "
                    "fastest are re-run first, then the order the sweep ran them in")
    a = ap.parse_args()
    try:
        import cupy as cp
    except ImportError:  # the baselines do not need it: time them, and say why kiln's sources are not re-run
        cp = None
        print("attention_check: no CuPy here: kiln's candidates are not re-run (the gate's times stand); "
              "eager and the SDPA backends are timed", file=sys.stderr)

    srcs = []
    for d in sorted(p for p in pathlib.Path(a.src).iterdir() if p.is_dir()):
        files = sorted(d.glob("*.cu"))
        rank: dict = {}
        jl = pathlib.Path(a.sweep or "/nonexistent") / (d.name + ".jsonl")
        for n, line in enumerate(jl.read_text().splitlines() if jl.exists() else []):
            if line.startswith("{"):
                r = json.loads(line)
                res = r.get("result", {})
                us = ((res.get("workloads") or [{}])[-1].get("time_us") or {}).get("median")
                ok = res.get("outcome") == "ok" and us
                rank[pathlib.Path(r.get("file", "")).name] = (0, us, n) if ok else (1, 0, n)
        files.sort(key=lambda f: rank.get(f.name, (2, 0, 0)))
        srcs += files[:a.per_row] if a.per_row else files
    def build(f):
        text = f.read_text()
        if "// kiln: tensormap" in text:
            return f, None, "tensor maps: this launcher does not encode them (the gate ran it)"
        if "#define ATT_PAGED 1" in text:
            return f, None, "paged: this launcher passes neither scalars nor two outputs (the gate ran it)"
        cubin = f.with_suffix(".cubin")
        r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", "-std=c++17", "-o", str(cubin), str(f)],
                           capture_output=True, text=True)
        return f, cubin if r.returncode == 0 else None, r.stderr[-1500:]
    if cp is None:
        srcs = []
    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        built = list(ex.map(build, srcs))
    rows = []
    by_problem: dict = {}
    if cp is None:
        by_problem = {d.name: [] for d in sorted(pathlib.Path(a.problems).iterdir()) if d.is_dir()}
    for f, cubin, log in built:
        by_problem.setdefault(f.parent.name, []).append((f, cubin, log))
    for name, cands in sorted(by_problem.items()):
        definition, ns, workloads = load_problem(pathlib.Path(a.problems) / name)
        for wi, w in enumerate(workloads):
            axes = w.get("axes", {})
            torch.manual_seed(wi)
            inputs = ns["make_inputs"](axes, "cuda")
            ref = ns["run"](**inputs)
            fl = flops(definition, inputs)
            if "bench" in definition.get("kiln", {}):
                base = baselines(definition, ns, inputs, a.iters)
                row = {"problem": name, "workload": wi, "kind": "baseline", **base, "flops": fl}
                print(json.dumps(row), flush=True)
                rows.append(row)
            for f, cubin, log in cands:
                src = f.read_text()
                point = re.search(r"// params: (.*)", src).group(1).strip()
                row = {"problem": name, "workload": wi, "kind": "kiln", "file": f.name, "point": point}
                if cubin is None:
                    row.update(outcome="gate only" if "(the gate ran it)" in log else "compile", log=log)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
                    continue
                out = torch.empty_like(ref)
                out.fill_(float("nan"))
                mod = cp.RawModule(path=str(cubin))
                kern = mod.get_function("attention_kernel")
                grid, block, smem = launch_of(src, axes)
                if smem > 48 * 1024:
                    kern.max_dynamic_shared_size_bytes = smem
                args = []
                for p in params_of(src):
                    if p in inputs:
                        args.append(np.uint64(inputs[p].data_ptr()))
                    elif p in axes:
                        args.append(np.int64(axes[p]))
                    else:
                        args.append(np.uint64(out.data_ptr()))
                def go():
                    kern(grid, block, tuple(args), shared_mem=smem)
                try:
                    go()
                    torch.cuda.synchronize()
                except Exception as e:
                    row.update(outcome="launch", log=str(e)[:300])
                    print(json.dumps(row), flush=True)
                    rows.append(row)
                    continue
                atol, rtol, rl2 = TOL[ref.dtype]
                o, r = out.float(), ref.float()
                nan_ok = bool(torch.equal(o.isnan(), r.isnan()))
                fin = ~r.isnan()
                bad = int(((o[fin] - r[fin]).abs() > atol + rtol * r[fin].abs()).sum())
                l2 = float((o[fin] - r[fin]).norm() / max(r[fin].norm(), 1e-30))
                ok = nan_ok and bad == 0 and l2 <= rl2
                us = time_us(go, a.iters)
                row.update(outcome="ok" if ok else "wrong", bad=bad, rel_l2=l2, nan_ok=nan_ok,
                           max_abs=float((o[fin] - r[fin]).abs().max()), us=us,
                           tflops=fl / us / 1e6)
                print(json.dumps(row), flush=True)
                rows.append(row)
            del inputs, ref
            torch.cuda.empty_cache()
    print("\n| problem | w | kiln best point | kiln us | TFLOP/s | eager | flash | cuDNN | efficient | outcomes |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    keys = sorted({(r["problem"], r["workload"]) for r in rows})
    for key in keys:
        ks = [r for r in rows if (r["problem"], r["workload"]) == key and r["kind"] == "kiln"]
        base = next((r for r in rows if (r["problem"], r["workload"]) == key and r["kind"] == "baseline"), {})
        good = [r for r in ks if r.get("outcome") == "ok"]
        best = min(good, key=lambda r: r["us"]) if good else None
        outcomes = ",".join(sorted({r.get("outcome") for r in ks}))
        fmt = lambda v: "—" if v is None else f"{v:.1f}"
        print(f"| {key[0]} | {key[1]} | {best['point'] if best else '—'} | {fmt(best['us'] if best else None)} | "
              f"{fmt(best['tflops'] if best else None)} | {fmt(base.get('eager'))} | {fmt(base.get('flash'))} | "
              f"{fmt(base.get('cudnn'))} | {fmt(base.get('efficient'))} | {outcomes} ({len(good)}/{len(ks)} ok) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
