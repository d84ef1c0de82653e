"""Chain problems (docs/capture.md "Chain problems"): capture joins producer->consumer chains of memory-bound
calls of the bundled examples (--small, CPU) into problems of kind "chain", and the families prove them on
the cpu backend. The Gemma-4 mask chain (scale mul, mask add, softmax in fp32, cast) is proven by `gen` and
by the softmax family; the VAE's residual add joined to the next GroupNorm + SiLU keeps the sum as a second
output, and `gen` proves both forms and the GroupNorm calls alone; Qwen-3.5's RMSNormGated is one leaf
module (its SiLU is called, not registered), so its chain is the module problem; the eager attention block
(q.kT, scale, mask, softmax, cast, .v) is one chain problem with "pattern": "attention" that `gen` declines,
with the reason. A chain entry (tests/data/chains/softmax_chain.py, optimized on the cpu backend) replaces the
chain inside torch.compile with eager's outputs, and nowhere else; so does one with two outputs
(tests/data/chains/groupnorm_chain.py: a residual sum read again after its GroupNorm + SiLU).
From the examples themselves: Gemma-4's mask chain is one op of every compiled layer, every VAE add +
GroupNorm + SiLU chain one op of the compiled decoder, and Qwen-3.5's RMSNormGated (two activations) is
replaced in eager, each with the model's own outputs. Gemma-4's attention block, proven by the attention family,
is one op of every compiled sliding layer; an attention kernel built for a band mask runs only where the live
mask holds that band (tests/data/chains/attention_masks.py: layers with masks of one shape, different bands, as
buffers or computed in the compiled graph).
A GEMM with the pointwise epilogue cuBLASLt fuses after it (tests/data/chains/gemm_epilogue.py: nn.Linear +
GELU (tanh), nn.Linear + ReLU, x @ w + b then GELU (erf)) is one chain problem with "pattern":
"gemm_epilogue" each, which the cublaslt family matches; the gate proves the first two and refuses the
third in float32 (cuBLASLt's GELU is the tanh form); Gemma-4's MLP gate projection + GELU and Qwen-3.5's
in_proj_a + cast to float32 are ones too. The Linear + ReLU block's entry is one op of the compiled model.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KILN = Path(os.environ.get("KILN_BIN", "build/kiln"))
if not KILN.is_absolute():
    KILN = ROOT / KILN

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.skipif(not KILN.exists(), reason=f"{KILN} is not built (make all)"),
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                 reason="the examples need transformers (python/requirements-examples.txt)")]

sys.path.insert(0, str(ROOT / "python"))


def kiln_env() -> dict:
    env = dict(os.environ)
    env["KILN_PYTHON"] = sys.executable
    env["PYTHONPATH"] = str(ROOT / "python") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_kiln(args: list, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(KILN), *map(str, args)], cwd=ROOT, env=kiln_env(), capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The three examples captured at --small on the CPU: {name: run directory}."""
    out = {}
    for name in ("gemma4", "vae_decoder", "qwen_moe"):
        run = tmp_path_factory.mktemp(name)
        r = subprocess.run([sys.executable, "-m", "kiln.capture", str(ROOT / "examples" / f"{name}.py"), "--out",
                            str(run), "--device", "cpu", "--quiet", "--no-reference", "--", "--small", "--device",
                            "cpu", "--iters", "1"], cwd=ROOT, env=kiln_env(), capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        out[name] = run
    return out


def chains(run: Path) -> list:
    """[(problem dir, definition)] of the run's chain problems."""
    found = []
    for p in sorted((run / "problems").iterdir()):
        d = json.loads((p / "definition.json").read_text())
        if d["kiln"]["kind"] == "chain":
            found.append((p, d))
    return found


def short(labels: list) -> list:
    return [label.split("::")[1] for label in labels]


def prove(problem: Path, family: str, out: Path) -> dict:
    r = run_kiln(["sweep", problem, "--backend", "cpu", "--family", family, "--limit", 1, "--json", "--iters", 1,
                  "--out", out])
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(r.stdout)["rows"]
    assert rows, f"{family} gave no candidate for {problem.name}"
    return rows[0]["result"]


def real_inputs(problem: Path) -> dict:
    """The real set's tensors as stored (memory order; the reference restores the captured strides)."""
    from safetensors.torch import load_file
    return load_file(str(problem / "tensors" / "real.safetensors"))


def run_reference(d: dict, inputs: dict):
    scope: dict = {}
    exec(compile(d["reference"], "reference", "exec"), scope)
    return scope["run"](**inputs)


def test_view_steps():
    """The views between two calls of a chain: only those the generator follows on a computed value."""
    from kiln.capture_chain import view_steps
    from kiln.capture_record import TensorMeta
    src = TensorMeta((1, 64, 2, 64), torch.bfloat16, (8192, 128, 64, 1), 0, "cpu")
    same = TensorMeta((1, 64, 2, 64), torch.bfloat16, (8192, 128, 64, 1), 0, "cpu")
    assert view_steps(src, same) == []
    transposed = TensorMeta((1, 2, 64, 64), torch.bfloat16, (8192, 64, 128, 1), 0, "cpu")
    assert view_steps(src, transposed) == [("view", [64, 2, 64]), ("permute", [1, 0, 2]), ("view", [1, 2, 64, 64])]
    x = torch.randn(1, 64, 2, 64)
    y = x.view(64, 2, 64).permute(1, 0, 2).view(1, 2, 64, 64)
    assert torch.equal(y, x.transpose(1, 2))
    col = TensorMeta((4, 1), torch.float32, (1, 1), 0, "cpu")
    assert view_steps(col, TensorMeta((4, 8), torch.float32, (1, 0), 0, "cpu")) == [("view", [4]), ("view", [4, 1]),
                                                                                   ("expand", [4, 8])]
    merged = TensorMeta((128, 64), torch.bfloat16, (64, 1), 0, "cpu")
    assert view_steps(src, merged) is None  # a reshape that merges dims of a computed value
    sliced = TensorMeta((1, 64, 2, 64), torch.bfloat16, (8192, 128, 64, 1), 64, "cpu")
    assert view_steps(src, sliced) is None


def test_gemma_mask_softmax_chain(runs, tmp_path):
    found = [(p, d) for p, d in chains(runs["gemma4"])
             if short(d["kiln"]["members"]) == ["mul.Tensor", "add.Tensor", "softmax.int", "to.dtype"]]
    assert found, [short(d["kiln"]["members"]) for _, d in chains(runs["gemma4"])]
    problem, d = found[0]
    k = d["kiln"]
    assert [op["aten"] for op in k["ops"]] == k["members"] and len(k["outputs"]) == 1
    assert k["calls"] >= 5 and 0 < k["share"] < 1 and "pattern" not in k
    assert len(d["inputs"]) == 2 and d["outputs"]["out0"]["dtype"] == "bfloat16"
    mask = [n for n, lay in k["layouts"].items() if n in d["inputs"] and lay["stored_shape"][1] == 1]
    assert mask, k["layouts"]  # the mask is read once for every head
    for family in ("gen", "softmax"):
        res = prove(problem, family, tmp_path / family)
        assert res["outcome"] == "ok", (family, res)
        assert res["summary"]["proved"] == res["summary"]["workloads"]


def test_vae_residual_groupnorm_silu_chain(runs):
    """The residual add of one block joined to the next block's GroupNorm + SiLU (a module of its own): the
    sum is read again by the next residual add, so the chain returns it too."""
    found = [(p, d) for p, d in chains(runs["vae_decoder"])
             if short(d["kiln"]["members"]) == ["add.Tensor", "group_norm.default", "silu.default"]]
    assert found, [short(d["kiln"]["members"]) for _, d in chains(runs["vae_decoder"])]
    assert any(len(d["outputs"]) == 2 for _, d in found)  # the last block's sum is read by norm_out alone
    for problem, d in found:
        assert d["kiln"]["input_origins"]["weight"].endswith("norm1.weight") or \
            d["kiln"]["input_origins"]["weight"] == "norm_out.weight"
        inputs = real_inputs(problem)
        outs = run_reference(d, inputs)
        y = outs[-1] if isinstance(outs, tuple) else outs
        a, b = (inputs[n] for n in ("input0", "input1"))
        groups = d["kiln"]["ops"][1]["args"][1]
        if len(d["outputs"]) == 2:
            assert torch.equal(outs[0], a + b)
        expect = torch.nn.functional.silu(torch.nn.functional.group_norm(a + b, groups, inputs["weight"],
                                                                         inputs["bias"], 1e-6))
        assert torch.allclose(y, expect, atol=1e-6)


def test_vae_groupnorm_chains_proven_by_gen(runs, tmp_path):
    """`gen` lowers group_norm (the channels split into groups, a Welford reduction over each group's channels and
    H, W): every VAE chain, with the sum as a second output or without, and the single GroupNorm calls are proven
    on every workload."""
    found = [(p, d) for p, d in chains(runs["vae_decoder"])
             if short(d["kiln"]["members"]) == ["add.Tensor", "group_norm.default", "silu.default"]]
    assert sorted({len(d["outputs"]) for _, d in found}) == [1, 2], [p.name for p, _ in found]
    singles = sorted(p for p in (runs["vae_decoder"] / "problems").iterdir() if p.name.startswith("group_norm_"))
    assert singles
    for problem in [p for p, _ in found] + singles:
        res = prove(problem, "gen", tmp_path / problem.name)
        assert res["outcome"] == "ok", (problem.name, res)
        assert res["summary"]["proved"] == res["summary"]["workloads"], (problem.name, res)


def test_vae_add_groupnorm_chains_proven_by_groupnorm(runs, tmp_path):
    """The groupnorm family's add variant proves the VAE chains, those that return the sum (stored and read back)
    and the one that does not (a and b read again)."""
    found = [(p, d) for p, d in chains(runs["vae_decoder"])
             if short(d["kiln"]["members"]) == ["add.Tensor", "group_norm.default", "silu.default"]]
    for problem, d in found:
        r = run_kiln(["sweep", problem, "--backend", "cpu", "--family", "groupnorm", "--limit", 1, "--json",
                      "--iters", 2, "--out", tmp_path / problem.name / "src", "--ref-dir",
                      tmp_path / problem.name / "ref"], timeout=300)
        assert r.returncode == 0 and "(add_group_norm_silu)" in r.stderr, r.stderr[-3000:]
        rows = json.loads(r.stdout)["rows"]
        assert rows and all(row["result"]["outcome"] == "ok" for row in rows), r.stdout[-3000:]


@pytest.mark.parametrize("name", ["gn_native_f32", "gn_silu_f32", "gn_silu_bf16", "gn_mixed_bf16",
                                  "gn_module_cast_bf16"])
def test_group_norm_forms_proven_by_gen(name, tmp_path):
    """The groupnorm family's captured forms, proven by `gen` too: native_group_norm's mean and rstd ([N, group])
    as outputs of the same reduction, bf16 in fp32 rounded once, a bf16 input with fp32 weights, GroupNorm32's
    cast in and out."""
    problem = tmp_path / name
    shutil.copytree(ROOT / "tests" / "data" / "families" / "chnorm" / name, problem)
    res = prove(problem, "gen", tmp_path / "out")
    assert res["outcome"] == "ok" and res["summary"]["proved"] == res["summary"]["workloads"], res


def test_qwen_rmsnorm_gated_is_its_module(runs, tmp_path):
    """RMSNormGated's chain (cast, pow, mean, add, rsqrt, mul, cast, weight mul, gate cast, SiLU, mul, cast)
    is exactly one leaf-module call: model.json lists the chain with the module's problem, not a second one."""
    model = json.loads((runs["qwen_moe"] / "model.json").read_text())
    gated = [c for c in model["chain_groups"] if c["is_module"] and c["module_paths"][0].endswith("linear_attn.norm")]
    assert gated and gated[0]["problem"].startswith("module_Qwen3_5MoeRMSNormGated"), model["chain_groups"][:8]
    assert len(gated[0]["ops_of_first_call"]) == 12
    names = {p.name for p in (runs["qwen_moe"] / "problems").iterdir()}
    assert gated[0]["problem"] in names
    for family in ("gen", "rmsnorm"):  # proven like any chain
        res = prove(runs["qwen_moe"] / "problems" / gated[0]["problem"], family, tmp_path / family)
        assert res["outcome"] == "ok" and res["summary"]["proved"] == res["summary"]["workloads"], (family, res)


def gemma_blocks(run: Path) -> dict:
    """Gemma-4 --small's attention block problems by head dim: 64 (the sliding layers) and 512 (the full one)."""
    found = {}
    for p, d in chains(run):
        if d["kiln"].get("pattern") == "attention":
            assert len(d["kiln"]["members"]) == 6, (p.name, d["kiln"]["members"])
            found.setdefault(int(d["outputs"]["out0"]["shape"][-1].lstrip("n")), []).append((p, d))
    return found


def test_attention_block_is_one_chain(runs, tmp_path):
    found = gemma_blocks(runs["gemma4"])
    assert sorted(found) == [64, 512] and len(found[64]) == 1 and len(found[512]) == 1, found
    problem, d = found[64][0]
    members = short(d["kiln"]["members"])
    assert members == ["matmul.default", "mul.Tensor", "add.Tensor", "softmax.int", "to.dtype", "matmul.default"]
    inputs = real_inputs(problem)
    q, k, mask, v = (inputs[f"input{i}"] for i in range(4))
    out = run_reference(d, inputs)
    # the reference restores the captured strides: q transposed, k and v expanded over the heads (GQA)
    qs, ks, vs = q.permute(0, 2, 1, 3), k.permute(2, 3, 1, 0).expand(1, 2, 64, 64), v.expand(1, 2, 64, 64)
    expect = torch.softmax(qs @ ks * 1.0 + mask, -1, dtype=torch.float32).to(torch.bfloat16) @ vs
    assert torch.equal(out, expect)
    r = run_kiln(["sweep", problem, "--backend", "cpu", "--family", "gen", "--list"])
    assert "gen: aten::matmul.default: no lowering rule" in r.stdout + r.stderr


def test_full_attention_block_reads_its_own_mask(runs, tmp_path):
    """The full-attention layer's block (head dim 512) leaves out the mask's computation, which only it reads
    (add, le, where from the positions: joined to its softmax chain), and reads that mask as an input: the
    full-causal mask its own call added, not the sliding layers' window mask that the add's signature held
    first. The attention family matches it as an exact causal band and proves it on the cpu backend."""
    (problem, d), = gemma_blocks(runs["gemma4"])[512]
    assert short(d["kiln"]["members"]) == ["matmul.default", "mul.Tensor", "add.Tensor", "softmax.int",
                                           "to.dtype", "matmul.default"]
    mask = real_inputs(problem)[d["kiln"]["ops"][2]["args"][1]["ref"]].float()[0, 0]
    n = mask.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    assert torch.equal(mask == 0, causal) and bool((mask[~causal] < -1e38).all())
    listed = run_kiln(["sweep", problem, "--backend", "cpu", "--family", "attention", "--list"])
    assert "matches family attention (attention_causal_mask_gqa)" in listed.stdout + listed.stderr, listed.stderr
    assert "ATT_BLOCK_N=32" in listed.stdout + listed.stderr  # head dim 512's start: two blocks a row tile
    res = prove(problem, "attention", tmp_path / "prove")
    assert res["outcome"] == "ok" and res["summary"]["proved"] == res["summary"]["workloads"], res


def test_chains_stay_inside_a_forward_pass(tmp_path):
    """A decode loop's cats read the previous pass's cat (the KV cache): capture joins each pass's pointwise tail
    and its cat into a chain, but never the cats of two passes (they never run as one graph, so such a chain
    could not be replaced: GPT-2's generate gave one 'chain_cat_0' of four passes' cats)."""
    run = capture_cpu(ROOT / "tests" / "data" / "chains" / "kv_cat_steps.py", tmp_path / "run")
    found = chains(run)
    assert found, "no chain captured"
    for p, d in found:
        cats = [op for op in d["kiln"]["ops"] if op["aten"] == "aten::cat.default"]
        assert len(cats) <= 1, (p.name, [op["aten"] for op in d["kiln"]["ops"]])
    assert any(any(op["aten"] == "aten::sigmoid.default" for op in d["kiln"]["ops"]) and
               any(op["aten"] == "aten::cat.default" for op in d["kiln"]["ops"]) for _, d in found), \
        [p.name for p, _ in found]


def test_model_json_links_chains(runs):
    model = json.loads((runs["gemma4"] / "model.json").read_text())
    written = [c for c in model["chain_groups"] if c["problem"] and not c["is_module"]]
    assert written
    for c in written:
        for i in c["ops_of_first_call"]:
            assert c["problem"] in model["ops"][i]["chain_problems"]


def test_gemm_epilogue_blocks(tmp_path):
    """Each GEMM whose result only a bias add, ReLU/GELU or a cast reads is written a second time with that
    epilogue, its members the GEMM and those calls; the cublaslt family matches each one with the fused
    epilogue, and the gate (not the matcher) refuses erf's GELU computed as cuBLASLt's tanh form in float32."""
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "kiln.capture", str(GEMM_SCRIPT), "--out", str(run), "--device",
                        "cpu", "--quiet", "--no-reference"], cwd=ROOT, env=kiln_env(), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    found = {tuple(short(d["kiln"]["members"])): (p, d) for p, d in chains(run)
             if d["kiln"].get("pattern") == "gemm_epilogue"}
    tanh, relu, erf = (("linear.default", "gelu.default"), ("linear.default", "relu.default"),
                       ("matmul.default", "add.Tensor", "gelu.default"))
    assert set(found) == {tanh, relu, erf}, list(found)
    ge = _script_module(GEMM_SCRIPT)
    model = ge.build()
    for members, (problem, d) in found.items():
        assert d["kiln"]["calls"] == 2 and 0 < d["kiln"]["share"] < 1
        inputs = real_inputs(problem)
        x = inputs["input0"]
        with torch.no_grad():
            if members == erf:
                want = torch.nn.functional.gelu(x @ inputs["input1"] + inputs["input2"])
            else:
                fc = model.fc1 if members == tanh else model.fc2
                assert torch.equal(inputs["weight"], fc.weight)
                want = (model.act1 if members == tanh else model.act2)(fc(x))
        assert torch.equal(run_reference(d, inputs), want)
        # the GEMM's flops, for the speed of light's compute side (2 x D's elements x K)
        assert d["kiln"]["flops"] == 2 * want.numel() * x.shape[-1], d["kiln"].get("flops")
        listed = run_kiln(["sweep", problem, "--backend", "cpu", "--list"])
        variant = {tanh: "linear_bias_gelu", relu: "linear_bias_relu", erf: "matmul_bias_gelu"}[members]
        assert f"matches family cublaslt ({variant})" in listed.stdout + listed.stderr, listed.stdout
        res = prove(problem, "cublaslt", tmp_path / problem.name)
        if members == erf:  # |gelu_erf - gelu_tanh| reaches 4e-4: over float32's tolerance
            assert res["outcome"] == "mismatch", res
            assert 1e-4 < res["evidence"]["max_abs_err"] < 1e-3, res["evidence"]
        else:
            assert res["outcome"] == "ok", res
            assert res["summary"]["proved"] == res["summary"]["workloads"]


def test_gemm_epilogue_entry_inside_torch_compile(tmp_path):
    """The nn.Linear + ReLU block, optimized on the cpu backend (the cublaslt family's C GEMM with the
    epilogue), is one op of the compiled graph: a hit, and the model's output torch.compile's."""
    import kiln
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "kiln.capture", str(GEMM_SCRIPT), "--out", str(run), "--device",
                        "cpu", "--quiet", "--no-reference"], cwd=ROOT, env=kiln_env(), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    found = [p for p, d in chains(run) if d["kiln"].get("pattern") == "gemm_epilogue"
             and short(d["kiln"]["members"]) == ["linear.default", "relu.default"]]
    assert len(found) == 1
    library = optimize_alone(found, tmp_path / "opt")
    ge = _script_module(GEMM_SCRIPT)
    model = ge.build()
    x = torch.randn(ge.ROWS, ge.IN)
    with torch.no_grad():
        want = torch.compile(model)(x)
    torch._dynamo.reset()
    inst = kiln.install(str(library), model, entries="all", compile=True)
    try:
        assert inst.installed == [found[0].name], inst.summary()
        with torch.no_grad():
            got = model(x)
        assert inst.stats()["hits"] == 1, (inst.stats(), inst.notes)
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (got - want).abs().max()
    finally:
        kiln.uninstall(inst)
        torch._dynamo.reset()


def test_example_gemm_epilogues(runs):
    """Gemma-4's MLP: gelu(gate_proj(x)) * up_proj(x). The gate projection and its GELU (tanh) are one block
    cuBLASLt fuses; the product with up_proj is not an epilogue it has, so the block ends at the GELU.
    Qwen-3.5's in_proj_a and its cast to float32 are one too (D written as float32)."""
    def blocks(run, suffix):
        return [(p, d) for p, d in chains(run) if d["kiln"].get("pattern") == "gemm_epilogue"
                and any(path.endswith(suffix) for path in d["kiln"]["module_paths"])]
    found = blocks(runs["gemma4"], "mlp.gate_proj")
    assert len(found) == 1, [d["kiln"]["module_paths"] for _, d in chains(runs["gemma4"])]
    problem, d = found[0]
    k = d["kiln"]
    assert short(k["members"]) == ["linear.default", "gelu.default"]
    assert k["ops"][1]["kwargs"] == {"approximate": "tanh"}
    assert k["calls"] == len(k["module_paths"]) > 1
    listed = run_kiln(["sweep", problem, "--backend", "cpu", "--list"])
    assert "matches family cublaslt (linear_gelu)" in listed.stdout + listed.stderr
    found = blocks(runs["qwen_moe"], "linear_attn.in_proj_a")
    assert len(found) == 1 and short(found[0][1]["kiln"]["members"]) == ["linear.default", "to.dtype"]
    assert found[0][1]["outputs"]["out0"]["dtype"] == "float32"
    listed = run_kiln(["sweep", found[0][0], "--backend", "cpu", "--list"])
    assert "matches family cublaslt (linear_to_float32)" in listed.stdout + listed.stderr


def test_example_gated_pairs(runs, tmp_path):
    """The front of each MLP: Gemma-4's gelu_tanh(gate_proj(x)) * up_proj(x) (GeGLU) and Qwen-3.5's shared
    expert silu(gate_proj(x)) * up_proj(x) (SwiGLU) are one "gemm_gated" block a layer, which the wgmma family
    matches as a gated pair (both projections in one kernel) and the cublaslt family declines; the cpu
    candidate is proved by the gate on the captured tensors."""
    for name, act, path, variant in (("gemma4", "gelu.default", "mlp.gate_proj", "linear_gated_gelu"),
                                     ("qwen_moe", "silu.default", "shared_expert.gate_proj", "linear_gated_silu")):
        found = [(p, d) for p, d in chains(runs[name]) if d["kiln"].get("pattern") == "gemm_gated"]
        assert len(found) == 1, [p.name for p, _ in found]
        problem, d = found[0]
        k = d["kiln"]
        assert short(k["members"]) == ["linear.default", act, "linear.default", "mul.Tensor"]
        assert k["calls"] == len(k["module_paths"]) > 1
        assert all(m.endswith(path) for m in k["module_paths"]), k["module_paths"]
        inputs = real_inputs(problem)
        assert len({v.shape[-1] for v in inputs.values()}) == 1  # x, wg and wu: K last
        out = run_reference(d, inputs)
        # both projections' flops, the speed of light's compute side: 2 GEMMs x 2 x D's elements x K
        assert k["flops"] == 4 * out.numel() * next(iter(inputs.values())).shape[-1], (k.get("flops"), out.shape)
        listed = run_kiln(["sweep", problem, "--backend", "cpu", "--list"])
        assert f"matches family wgmma ({variant})" in listed.stdout + listed.stderr, listed.stdout
        assert "matches family cublaslt" not in listed.stdout + listed.stderr
        res = prove(problem, "wgmma", tmp_path / name)
        assert res["outcome"] == "ok", res
        assert res["summary"]["proved"] == res["summary"]["workloads"]


CHAIN_SCRIPT = ROOT / "tests" / "data" / "chains" / "softmax_chain.py"
GEMM_SCRIPT = ROOT / "tests" / "data" / "chains" / "gemm_epilogue.py"
GN_CHAIN_SCRIPT = ROOT / "tests" / "data" / "chains" / "groupnorm_chain.py"


def _chain_library(tmp_path_factory, script: Path, chain: str, others: tuple = (), backend: str = "cpu") -> Path:
    """script captured on the CPU, its chain problem named chain (its only one besides those named in others)
    alone optimized on backend: the library directory."""
    run = capture_cpu(script, tmp_path_factory.mktemp(script.stem))
    names = [p.name for p, _ in chains(run)]
    assert names == sorted([chain, *others]), names
    return optimize_alone([run / "problems" / chain], tmp_path_factory.mktemp(f"{script.stem}_only"),
                          backend=backend)


def capture_cpu(script: Path, run: Path, *options) -> Path:
    """script captured on the CPU into run (with capture's options): run."""
    r = subprocess.run([sys.executable, "-m", "kiln.capture", str(script), "--out", str(run), "--device",
                        "cpu", "--quiet", *options], cwd=ROOT, env=kiln_env(), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return run


def optimize_alone(problems: list, out: Path, budget: int = 2, backend: str = "cpu") -> Path:
    """The problem directories copied into a new run at out and optimized there on backend, with nothing else
    beside them: its library directory."""
    (out / "problems").mkdir(parents=True, exist_ok=True)
    for p in problems:
        shutil.copytree(p, out / "problems" / p.name)
    r = run_kiln(["optimize", out, "--backend", backend, "--budget", budget, "--time", 300], timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out / "library"


@pytest.fixture(scope="module")
def chain_library(tmp_path_factory):
    """tests/data/chains/softmax_chain.py's chain (mul, add, softmax) optimized on the cpu backend."""
    return _chain_library(tmp_path_factory, CHAIN_SCRIPT, "chain_mul_add_softmax_16x64_f32")


def _script_module(script: Path):
    sys.path.insert(0, str(script.parent))
    try:
        return importlib.import_module(script.stem)
    finally:
        sys.path.remove(str(script.parent))


def _chain_model():
    return _script_module(CHAIN_SCRIPT)


def test_chain_entry_replaces_the_chain_inside_torch_compile(chain_library):
    """The chain is one op of the compiled graph (a hit of its entry) and the outputs are eager's; without
    torch.compile nothing replaces it; where the chain's intermediate is used elsewhere (returned too) the
    pattern does not match and the compiled model computes what eager does."""
    import kiln
    sc = _chain_model()
    x = torch.randn(sc.ROWS, sc.IN)
    model = sc.build()
    with torch.no_grad():
        want = model(x)
    inst = kiln.install(str(chain_library), model, entries="all", compile=True)
    try:
        assert inst.installed == ["chain_mul_add_softmax_16x64_f32"], inst.summary()
        with torch.no_grad():
            got = model(x)
        assert torch.allclose(got, want, atol=1e-6, rtol=1e-5)
        assert inst.stats()["hits"] == 1, inst.stats()
    finally:
        kiln.uninstall(inst)

    class Leaky(sc.Net):
        def forward(self, x):
            z = self.proj(x) * 0.5 + self.bias
            return torch.softmax(z, -1), z

    leaky = Leaky()
    leaky.load_state_dict(model.state_dict())
    leaky.eval()
    with torch.no_grad():
        want_p, want_z = leaky(x)
    inst = kiln.install(str(chain_library), leaky, entries="all", compile=True)
    try:
        with torch.no_grad():
            p, z = leaky(x)
        assert torch.allclose(p, want_p, atol=1e-6, rtol=1e-5) and torch.allclose(z, want_z, atol=1e-6)
        assert inst.stats()["hits"] == 0, inst.stats()  # z is read outside the chain: Inductor's code
    finally:
        kiln.uninstall(inst)

    eager = sc.build()
    inst = kiln.install(str(chain_library), eager, entries="all")
    try:
        with torch.no_grad():
            assert torch.equal(eager(x), want)
        assert inst.stats()["hits"] == 0
    finally:
        kiln.uninstall(inst)


def example_model(name: str):
    """The bundled example's model and prompt as the `runs` fixture captured them (--small, CPU)."""
    example = _script_module(ROOT / "examples" / f"{name}.py")
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    config = example.build_config(True, 6 if name == "gemma4" else 4)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").to(torch.bfloat16).eval()
    return model, torch.randint(0, config.vocab_size, (1, 64))


def test_qwen_rmsnorm_gated_installed(runs, tmp_path):
    """RMSNormGated's forward takes two activations (the values and the gate, both [256, 32] bf16, so the
    gate alone cannot tell them apart): capture records which positional argument each was, and the module
    entry puts them back in their slots; every linear-attention layer's norm is a hit, the logits eager's."""
    import kiln
    from kiln.install_cost import EntryBench
    from kiln.install_runtime import Library
    name = next(p.name for p in (runs["qwen_moe"] / "problems").iterdir()
                if p.name.startswith("module_Qwen3_5MoeRMSNormGated"))
    d = json.loads((runs["qwen_moe"] / "problems" / name / "definition.json").read_text())
    assert d["kiln"]["activation_args"] == {"input0": 0, "input1": 1}
    library = optimize_alone([runs["qwen_moe"] / "problems" / name], tmp_path / "run")
    model, ids = example_model("qwen_moe")
    with torch.no_grad():
        want = model(ids).logits
    for dispatch in ("python", "cpp"):
        inst = kiln.install(str(library), model, entries="all", dispatch=dispatch)
        try:
            assert inst.installed == [name], inst.summary()
            with torch.no_grad():
                got = model(ids).logits
            assert inst.stats()["hits"] == len(d["kiln"]["module_paths"]) > 1, inst.stats()
            assert torch.allclose(got.float(), want.float(), atol=2e-2, rtol=2e-2), \
                (got.float() - want.float()).abs().max()
        finally:
            kiln.uninstall(inst)
    # kiln tune's per-call timing calls the model's own module with both activations in their places
    lib = Library(str(library))
    try:
        modules = dict(model.named_modules())
        bench = EntryBench(lib.entry(name), lib, modules)
        module = modules[d["kiln"]["module_paths"][0]]
        x, gate = (bench.inputs[i] for i, g in enumerate(lib.entry(name).inputs) if g["name"] != "weight")
        with torch.no_grad():
            assert torch.equal(bench.call(bench.inputs), module(x, gate))
    finally:
        lib.close()


def test_gemma_mask_chain_installed_inside_torch_compile(runs, tmp_path):
    """The Gemma-4 mask chain (scale mul, mask add, softmax in fp32, cast), optimized on the cpu backend, is
    one op of every layer's compiled attention (a hit per layer per forward, sliding and full masks alike:
    the kernel adds whatever mask it is given), and the compiled model's logits are torch.compile's."""
    import kiln
    name = next(p.name for p, d in chains(runs["gemma4"])
                if short(d["kiln"]["members"]) == ["mul.Tensor", "add.Tensor", "softmax.int", "to.dtype"])
    library = optimize_alone([runs["gemma4"] / "problems" / name], tmp_path / "run")
    model, ids = example_model("gemma4")
    compiled = torch.compile(model)
    with torch.no_grad():
        want = compiled(ids).logits
    torch._dynamo.reset()
    inst = kiln.install(str(library), model, entries="all", compile=True)
    try:
        assert inst.installed == [name], inst.summary()
        with torch.no_grad():
            got = model(ids).logits
        assert inst.stats()["hits"] == model.config.num_hidden_layers, inst.stats()
        assert torch.allclose(got.float(), want.float(), atol=2e-2, rtol=2e-2), (got.float() - want.float()).abs().max()
    finally:
        kiln.uninstall(inst)
        torch._dynamo.reset()


def test_two_output_chain_replaced_inside_torch_compile(tmp_path_factory):
    """A chain whose intermediate is read outside it (the residual sum, read again by the closing add) is
    captured with both as outputs; its entry's op returns both, so the add, the GroupNorm and the SiLU are one
    op of the compiled graph (a hit) and the model's output is eager's; in eager nothing replaces it."""
    import kiln
    library = _chain_library(tmp_path_factory, GN_CHAIN_SCRIPT, "chain_add_group_norm_silu_1x16x8x8_f32")
    manifest = json.loads((library / "manifest.json").read_text())
    assert [len(e["outputs"]) for e in manifest["entries"]] == [2], manifest["entries"]
    gc = _script_module(GN_CHAIN_SCRIPT)
    x = torch.randn(gc.BATCH, gc.CHANNELS, gc.SIDE, gc.SIDE)
    model = gc.build()
    with torch.no_grad():
        want = model(x)
    inst = kiln.install(str(library), model, entries="all", compile=True)
    try:
        assert inst.installed == ["chain_add_group_norm_silu_1x16x8x8_f32"], inst.summary()
        with torch.no_grad():
            got = model(x)
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (got - want).abs().max()
        assert inst.stats()["hits"] == 1, (inst.stats(), inst.notes)
    finally:
        kiln.uninstall(inst)

    eager = gc.build()
    inst = kiln.install(str(library), eager, entries="all")
    try:
        with torch.no_grad():
            assert torch.equal(eager(x), want)
        assert inst.stats()["hits"] == 0
    finally:
        kiln.uninstall(inst)


DW_CHAIN_SCRIPT = ROOT / "tests" / "data" / "chains" / "dwconv_chain.py"


def test_depthwise_conv_chain_replaced_inside_torch_compile(tmp_path_factory):
    """A MobileNet-v2 block's BatchNorm + ReLU6 -> depthwise 3x3 convolution -> BatchNorm + ReLU6 is one chain
    problem, which `gen` proves (optimize_alone) and whose entry is one op of the compiled block (a hit), with
    eager's output; in eager nothing replaces it. In kiln's graph mode too, installed under inference mode as
    kiln tune installs (the model's grad mode): the patterns are traced as AOTAutograd traces the graph
    (batch_norm decomposes to native_batch_norm under inference mode, where the graph holds
    _native_batch_norm_legit_no_training; traced there, no MobileNet-v2 chain matched in tune)."""
    chain = "chain_batch_norm_hardtanh_conv2d_2x32x12x12_f32"  # inference mode: the composite ops whole
    library = _chain_library(tmp_path_factory, DW_CHAIN_SCRIPT, chain, ("chain_batch_norm_add_2x8x12x12_f32",))
    manifest = json.loads((library / "manifest.json").read_text())
    entry = next(e for e in manifest["entries"] if e["problem"] == chain)
    assert entry["candidate"]["family"] == "gen", entry["candidate"]
    dc = _script_module(DW_CHAIN_SCRIPT)
    x = torch.randn(dc.BATCH, dc.CHANNELS, dc.SIDE, dc.SIDE)
    model = dc.build()
    with torch.no_grad():
        want = model(x)
    _one_hit(library, model, x, want, chain, True)
    _one_hit(library, dc.build(), x, want, chain, "graph")


def _one_hit(library, model, x, want, chain: str, compile, atol=1e-5, rtol=1e-5):
    """The chain entry alone installed with `compile` under inference mode, as kiln tune installs it (the
    model's grad mode), and model(x) (model(*x) for a tuple) run once there: one hit, eager's output within
    atol/rtol."""
    import kiln
    torch._dynamo.reset()
    with torch.inference_mode():
        inst = kiln.install(str(library), model, entries=[chain], compile=compile)
        try:
            assert inst.installed == [chain], inst.summary()
            got = model(*x) if isinstance(x, tuple) else model(x)
            assert inst.stats()["hits"] == 1, (compile, inst.stats(), inst.notes)
            torch.testing.assert_close(got.float(), want.float(), atol=atol, rtol=rtol)
        finally:
            kiln.uninstall(inst)
            torch._dynamo.reset()


DW_CHAIN_BF16_SCRIPT = ROOT / "tests" / "data" / "chains" / "dwconv_chain_bf16.py"


def test_bf16_depthwise_conv_chain_replaced_inside_torch_compile(tmp_path_factory):
    """The same block in bfloat16 (torchvision's MobileNet-v2 in bf16): Inductor's joint-graph passes fold the
    BatchNorm's bf16 rounding and the ReLU6's upcast into one convert, and the chain's pattern, traced through
    the same passes, still matches: one hit, eager's output within bfloat16's rounding."""
    chain = "chain_batch_norm_hardtanh_conv2d_2x32x12x12_bf16"
    library = _chain_library(tmp_path_factory, DW_CHAIN_BF16_SCRIPT, chain,
                             ("chain_batch_norm_add_2x8x12x12_bf16",))
    dc = _script_module(DW_CHAIN_BF16_SCRIPT)
    x = torch.randn(dc.BATCH, dc.CHANNELS, dc.SIDE, dc.SIDE, dtype=torch.bfloat16)
    model = dc.build()
    with torch.no_grad():
        want = model(x)
    _one_hit(library, model, x, want, chain, True, atol=0.1, rtol=0.05)


DENSE_CAT_SCRIPT = ROOT / "tests" / "data" / "gen" / "dense_cat.py"


def test_dense_cat_chain_replaced_inside_torch_compile(tmp_path_factory):
    """DenseNet's cat -> batch_norm -> relu over the cat of 25 feature maps: one chain of 29 inputs, which `gen`
    lowers (a cat's inputs share their other dims' axes, so 25 maps fit the axis table) and proves, and whose
    entry is one op of kiln's graph mode and of the compiled block where Inductor keeps the traced layout (a hit
    each), with eager's output. Where Inductor lays the convolutions out channels-last (on the CPU it always does,
    with mkldnn), the chain, one pass of pointwise work on 4-D tensors, is left to Inductor with a note, and so is
    the batch norm entry of the same cat, which no convolution writes or reads: no hit, eager's output."""
    # --top 100: the block's 25 cat chains are 25 signatures, more than the default 20 per kind, and which are
    # the slowest 20 depends on the machine's timing
    run = capture_cpu(DENSE_CAT_SCRIPT, tmp_path_factory.mktemp("dense_cat"), "--top", "100")
    cats = [p for p in (run / "problems").iterdir() if p.name.startswith("chain_cat_batch_norm_relu")]
    widest = max(cats, key=lambda p: len(json.loads((p / "definition.json").read_text())["inputs"]))
    assert len(json.loads((widest / "definition.json").read_text())["inputs"]) == 29
    # the block's last batch norm alone, between the cat and the ReLU: no convolution beside it
    norm = next(p for p in (run / "problems").iterdir() if p.name.startswith("batch_norm_default_2x104x6x6"))
    library = optimize_alone([widest, norm], tmp_path_factory.mktemp("dense_cat_only"))
    manifest = json.loads((library / "manifest.json").read_text())
    entry = next(e for e in manifest["entries"] if e["problem"] == widest.name)
    assert entry["candidate"]["family"] == "gen", entry["candidate"]
    assert any(e["problem"] == norm.name for e in manifest["entries"]), [e["problem"] for e in manifest["entries"]]
    dc = _script_module(DENSE_CAT_SCRIPT)
    torch.manual_seed(0)
    model = dc.Block().eval()
    x = torch.randn(2, dc.C0, 6, 6)
    with torch.no_grad():
        want = model(x)
    _one_hit(library, model, x, want, widest.name, "graph")
    import kiln
    from kiln.install_inductor import LEFT_TO_INDUCTOR
    torch._dynamo.reset()
    with torch.inference_mode():
        inst = kiln.install(str(library), model, entries=[widest.name, norm.name], compile=True)
        try:
            got = model(x)
            assert inst.stats()["hits"] == 0, inst.stats()
            for name in (widest.name, norm.name):
                assert any(n.startswith(name) and LEFT_TO_INDUCTOR in n for n in inst.notes), inst.notes
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        finally:
            kiln.uninstall(inst)
            torch._dynamo.reset()
    import torch._inductor.config as inductor_config
    with inductor_config.patch(layout_optimization=False):
        _one_hit(library, model, x, want, widest.name, True)


CONV_POOL_SCRIPT = ROOT / "tests" / "data" / "gen" / "conv_pool.py"


def test_pools_beside_convolutions_left_to_inductor(tmp_path_factory):
    """A max pool after a convolution's ReLU and an average pool after a 1x1 convolution: where Inductor lays the
    convolutions out channels-last (on the CPU, with mkldnn, always), each pool entry would cost a copy of its
    input and of its output, about three times the pool's own bytes, so both are left to Inductor with a note
    (no hit, eager's output); kiln's graph mode still takes each (a hit)."""
    run = capture_cpu(CONV_POOL_SCRIPT, tmp_path_factory.mktemp("conv_pool"))
    pools = [p for p in (run / "problems").iterdir() if p.name.startswith(("max_pool2d", "avg_pool2d"))]
    assert len(pools) == 2, sorted(p.name for p in (run / "problems").iterdir())
    library = optimize_alone(pools, tmp_path_factory.mktemp("conv_pool_only"))
    names = [e["problem"] for e in json.loads((library / "manifest.json").read_text())["entries"]]
    assert sorted(names) == sorted(p.name for p in pools), names
    cp = _script_module(CONV_POOL_SCRIPT)
    torch.manual_seed(0)
    model = cp.Net().eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        want = model(x)
    for name in names:
        _one_hit(library, model, x, want, name, "graph")
    import kiln
    from kiln.install_inductor import LEFT_TO_INDUCTOR
    torch._dynamo.reset()
    with torch.inference_mode():
        inst = kiln.install(str(library), model, entries=names, compile=True)
        try:
            got = model(x)
            assert inst.stats()["hits"] == 0, inst.stats()
            for name in names:
                assert any(n.startswith(name) and LEFT_TO_INDUCTOR in n for n in inst.notes), inst.notes
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        finally:
            kiln.uninstall(inst)
            torch._dynamo.reset()


EMPTY_CAT_SCRIPT = ROOT / "tests" / "data" / "chains" / "empty_cat_chain.py"


@pytest.fixture(scope="module")
def empty_cat_library(tmp_path_factory):
    return _chain_library(tmp_path_factory, EMPTY_CAT_SCRIPT, "chain_mul_neg_cat_add_1x2x16x8_f32")


@pytest.mark.parametrize("at", ["trace", "match"])
def test_chain_reading_an_empty_tensor_inside_torch_compile(empty_cat_library, at, monkeypatch):
    """Llama's keys at prefill: the rotary embedding and the KV cache's first cat, onto an empty tensor, are one
    chain whose last input is that empty tensor. Traced through Inductor's decompositions the chain's pattern
    reads nothing of it (cat drops empty inputs), and Inductor's matcher failed the whole compile on the first
    match ("Not all inputs to pattern found in match.kwargs": kiln tune of a Llama-3.2-1B on the H100). The
    entry is left out of compiled graphs with a note, and the compiled model gives eager's output: refused
    where the pattern is traced, and (at="match", that check off) where Inductor's matcher refuses a match."""
    import kiln
    import kiln.install_inductor as ii
    chain = "chain_mul_neg_cat_add_1x2x16x8_f32"
    if at == "match":
        monkeypatch.setattr(ii, "_unread_inputs", lambda graph: [])
    ec = _script_module(EMPTY_CAT_SCRIPT)
    x = ec.inputs()
    model = ec.build()
    with torch.no_grad():
        want = model(*x)
    torch._dynamo.reset()
    with torch.inference_mode():
        inst = kiln.install(str(empty_cat_library), model, entries=[chain], compile=True)
        try:
            got = model(*x)
            assert inst.stats()["hits"] == 0, inst.stats()
            why = "reads no value of t5" if at == "trace" else "Not all inputs to pattern found"
            assert any(n.startswith(chain) and why in n for n in inst.notes), inst.notes
            torch.testing.assert_close(got, want)
        finally:
            kiln.uninstall(inst)
            torch._dynamo.reset()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpu_pattern_traced_as_the_cpu_one(dtype):
    """A chain's pattern for a GPU's torch.compile is traced on fake tensors of that device (no GPU here) and
    goes through Inductor's joint-graph passes as on the CPU: the same nodes, reading its inputs. On meta
    tensors constant folding took the fp32 MobileNet-v2 block for one empty tensor and pointless_convert left
    the bf16 one's double convert, so no chain matched inside torch.compile on the H100."""
    from kiln.install_inductor import _examples, _node_keys, _reads_inputs, _trace_pattern, _tracing
    aten = torch.ops.aten

    def block(x, w, m, v, g, b, m2, v2, g2, b2):  # MobileNet-v2's BN -> ReLU6 -> depthwise conv -> BN -> ReLU6
        y = aten.hardtanh.default(aten.batch_norm.default(x, g, b, m, v, False, 0.1, 1e-5, True), 0.0, 6.0)
        y = aten.conv2d.default(y, w, None, [1, 1], [1, 1], [1, 1], 8)
        return aten.hardtanh.default(aten.batch_norm.default(y, g2, b2, m2, v2, False, 0.1, 1e-5, True), 0.0, 6.0)

    dt = getattr(torch, dtype)
    specs = [((2, 8, 6, 6), (288, 36, 6, 1), dt), ((8, 1, 3, 3), (9, 9, 3, 1), dt)] + [((8,), (1,), dt)] * 8
    keys = {}
    for device in ("cpu", "cuda"):
        examples = _examples(specs, torch.device(device))
        with _tracing(examples), torch.inference_mode(False):
            traced = _trace_pattern(block, examples)
        assert _reads_inputs(traced.graph), (device, traced.graph)
        keys[device] = _node_keys(traced.graph.nodes)
    assert keys["cuda"] == keys["cpu"] and len(keys["cpu"]) > 20, keys


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU: the cuda chain is installed on the GPU machine")
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_cuda_depthwise_conv_chain_replaced_in_graphs(tmp_path_factory, dtype):
    """The MobileNet-v2 block's chain optimized on the cuda backend and installed in the block on the GPU: one
    hit inside torch.compile and one in kiln's graph mode, eager's output (the patterns traced on fake cuda
    tensors: on meta ones no MobileNet-v2 chain was replaced inside torch.compile on the H100)."""
    script = DW_CHAIN_SCRIPT if dtype == "f32" else DW_CHAIN_BF16_SCRIPT
    chain = f"chain_batch_norm_hardtanh_conv2d_2x32x12x12_{dtype}"
    library = _chain_library(tmp_path_factory, script, chain, (f"chain_batch_norm_add_2x8x12x12_{dtype}",), "cuda")
    dc = _script_module(script)
    dt = torch.float32 if dtype == "f32" else torch.bfloat16
    x = torch.randn(dc.BATCH, dc.CHANNELS, dc.SIDE, dc.SIDE, dtype=dt, device="cuda")
    with torch.no_grad():
        want = dc.build().cuda()(x)
    tol = {"atol": 1e-4, "rtol": 1e-4} if dtype == "f32" else {"atol": 0.1, "rtol": 0.05}
    _one_hit(library, dc.build().cuda(), x, want, chain, True, **tol)
    _one_hit(library, dc.build().cuda(), x, want, chain, "graph", **tol)


def test_vae_chains_installed_inside_torch_compile(runs, tmp_path):
    """Every VAE add + GroupNorm + SiLU chain (one output, and the sum kept as a second), optimized on the cpu
    backend, replaces its calls in the example's compiled decoder: one hit per captured call, the image
    torch.compile's."""
    import kiln
    vae_decoder = _script_module(ROOT / "examples" / "vae_decoder.py")
    found = [(p, d) for p, d in chains(runs["vae_decoder"])
             if short(d["kiln"]["members"]) == ["add.Tensor", "group_norm.default", "silu.default"]]
    assert any(len(d["outputs"]) == 2 for _, d in found) and any(len(d["outputs"]) == 1 for _, d in found)
    library = optimize_alone([p for p, _ in found], tmp_path / "run", budget=1)
    torch.manual_seed(0)  # the example's --small decoder and latent, as the `runs` fixture captured them
    model = vae_decoder.Decoder((64, 64, 32, 32)).eval()
    z = torch.randn(1, 16, 8, 8)
    with torch.no_grad():
        want = torch.compile(model)(z)
    torch._dynamo.reset()
    inst = kiln.install(str(library), model, entries="all", compile=True)
    try:
        assert sorted(inst.installed) == sorted(p.name for p, _ in found), inst.summary()
        with torch.no_grad():
            got = model(z)
        assert inst.stats()["hits"] == sum(d["kiln"]["calls"] for _, d in found), inst.stats()
        assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (got - want).abs().max()
    finally:
        kiln.uninstall(inst)
        torch._dynamo.reset()


@pytest.fixture(scope="module")
def gemma_attention(runs, tmp_path_factory):
    """The Gemma-4 --small sliding layers' attention block (one chain problem of pattern "attention" for the five
    layers; the full layer's, head dim 512, is another), optimized alone on the cpu backend: (problem dir,
    definition, library dir)."""
    found = gemma_blocks(runs["gemma4"])[64]
    assert len(found) == 1, [p.name for p, _ in found]
    problem, d = found[0]
    return problem, d, optimize_alone([problem], tmp_path_factory.mktemp("gemma_attention"))


def test_gemma_attention_installed_inside_torch_compile(gemma_attention, tmp_path):
    """The attention block, proven by the attention family on the cpu backend, is one op of each sliding layer's
    compiled attention: a hit per sliding layer per forward, the mask (one tensor for those layers) checked once
    a forward. Logits against eager: this random bf16 model moves ~10 % (relative L2) when 5 % of the attention
    outputs move by one bf16 ulp, and torch.compile alone is ~25 % from eager, so the block itself is held to
    eager on the real tensors (the op on layer 0's q, k, mask, v within the gate's tolerance), and the logits
    to torch.compile's distance from eager."""
    import kiln
    problem, d, library = gemma_attention
    res = prove(problem, "attention", tmp_path / "prove")
    assert res["outcome"] == "ok" and res["summary"]["proved"] == res["summary"]["workloads"], res
    entry = json.loads((library / "manifest.json").read_text())["entries"][0]
    assert entry["candidate"]["family"] == "attention", entry["candidate"]
    mask = d["kiln"]["ops"][2]["args"][1]["ref"]  # the add's tensor
    assert entry["assumes"] == {mask: {"structure": {"kind": "band", "lower": -31, "upper": 0}}}  # window 32
    model, ids = example_model("gemma4")
    with torch.no_grad():
        want = model(ids).logits.float()
    inst = kiln.install(str(library), model, entries="all", compile=True)
    try:
        assert inst.installed == [problem.name], inst.summary()
        with torch.no_grad():
            got = model(ids).logits.float()
            again = model(ids).logits.float()
        stats = inst.stats()
        assert stats["hits"] == 2 * d["kiln"]["calls"] == 10 and stats["misses"] == 0, stats
        assert inst._inductor.structures.checks == 2, "one mask check a forward"
        assert torch.equal(got, again)
        assert (got - want).norm() / want.norm() < 0.35
        # the installed op on the captured layer's own tensors, in the layouts the model passes: eager's block
        inputs = real_inputs(problem)
        q, k, m, v = (inputs[f"input{i}"] for i in range(4))
        qs, ks, vs = q.permute(0, 2, 1, 3), k.permute(2, 3, 1, 0).expand(1, 2, 64, 64), v.expand(1, 2, 64, 64)
        op = getattr(torch.ops.kiln, inst.custom_ops[problem.name].split("::")[1])
        block = run_reference(d, inputs)
        tol = entry["tolerance_met"]["tolerance"]
        assert torch.allclose(op(qs, ks, m, vs).float(), block.float(), atol=tol["atol"], rtol=tol["rtol"])
    finally:
        kiln.uninstall(inst)
        torch._dynamo.reset()


ATT_MASKS_SCRIPT = ROOT / "tests" / "data" / "chains" / "attention_masks.py"


@pytest.fixture(scope="module")
def window_library(tmp_path_factory):
    """tests/data/chains/attention_masks.py's sliding-window block optimized on the cpu backend (with the block,
    its softmax part is a chain of its own: what `gen` and the softmax family take)."""
    return _chain_library(tmp_path_factory, ATT_MASKS_SCRIPT, "attention_1x2x256x64_bf16",
                          ("chain_mul_add_softmax_to_1x2x256x256_bf16",))


def attention_tolerance(library: Path) -> dict:
    """The tolerance the library's attention entry was proved within."""
    (entry,) = [e for e in json.loads((library / "manifest.json").read_text())["entries"]
                if e["problem"].startswith("attention")]
    return entry["tolerance_met"]["tolerance"]


@contextlib.contextmanager
def net_installed(library: Path, windows: tuple, seed: int, computed: bool = False, mode=torch.no_grad,
                  compile=True):
    """attention_masks.py's Net with these layers' windows (None: full causal), its inputs drawn with seed,
    eager's outputs under mode, and library installed into it inside torch.compile (compile="graph": kiln's
    graph mode): (model, inputs, eager's outputs, installation); uninstalled, and dynamo's caches reset, after."""
    import kiln
    am = _script_module(ATT_MASKS_SCRIPT)
    model = am.Net(windows, computed=computed).eval()
    x = am.inputs(seed)
    with mode():
        want = model(*x)
    inst = kiln.install(str(library), model, entries="all", compile=compile)
    try:
        yield model, x, want, inst
    finally:
        kiln.uninstall(inst)
        torch._dynamo.reset()


def test_attention_band_kernel_checks_the_mask(window_library):
    """A kernel built for a sliding window of 32 over 256 keys skips the key tiles outside the window: on a
    full-causal mask of the same shape and dtype (Gemma-4's full layers beside its sliding ones) it is wrong,
    so the installed op checks each mask's band once per tensor (again after it is written), runs the kernel
    where the mask masks everything outside the window (window 32, and 16 inside it), the eager block
    elsewhere (a miss), and every layer's output is eager's."""
    from kiln.install_gate import _Gate
    entry = json.loads((window_library / "manifest.json").read_text())["entries"][0]
    assert entry["assumes"] == {"mask0": {"structure": {"kind": "band", "lower": -31, "upper": 0}}}
    tol = entry["tolerance_met"]["tolerance"]
    window = _script_module(ATT_MASKS_SCRIPT).WINDOW
    with net_installed(window_library, (window, None, 16), 5) as (model, x, want, inst):
        with torch.no_grad():
            got = model(*x)
            stats, checks = inst.stats(), inst._inductor.structures.checks
            assert stats["hits"] == 2 and stats["misses"] == 1 and checks == 3, (stats, checks, inst.notes)
            assert torch.equal(got[1], want[1])  # the full-causal layer: eager's calls
            for g, w in zip(got, want):
                assert torch.allclose(g.float(), w.float(), atol=tol["atol"], rtol=tol["rtol"])
            model(*x)
            assert inst._inductor.structures.checks == 3  # the same mask tensors: no check
            model.mask0.copy_(model.mask1)  # written in place: checked again, and now it is not the window's
            got = model(*x)
        assert inst._inductor.structures.checks == 4 and inst.stats()["misses"] == 4, inst.stats()
        assert torch.equal(got[0], want[1])
        # the shape gate alone admits the full-causal mask, and the kernel is wrong there
        unchecked = _Gate(inst.library, inst.library.entries[0], inst).hit(x[0], x[1].transpose(2, 3), model.mask1,
                                                                          x[2])[0]
        assert not torch.allclose(unchecked.float(), want[1].float(), atol=tol["atol"], rtol=tol["rtol"])


def test_attention_band_check_in_inference_mode(window_library):
    """Under torch.inference_mode the masks are inference tensors, which have no version counter (reading it
    raised inside kiln's op, and tune's kiln + torch.compile timing of Gemma-4 failed on the H200): the check
    is remembered for the tensor object and its data pointer, once a forward, and the outputs are eager's."""
    tol = attention_tolerance(window_library)
    # one mask, computed in the graph, for both layers
    with net_installed(window_library, (32, 32), 5, computed=True, mode=torch.inference_mode) as (model, x, want,
                                                                                                   inst):
        with torch.inference_mode():
            for _ in range(2):
                got = model(*x)
                for g, w in zip(got, want):
                    assert torch.allclose(g.float(), w.float(), atol=tol["atol"], rtol=tol["rtol"])
        assert inst.stats()["hits"] == 4 and inst.stats()["misses"] == 0, inst.stats()
        assert inst._inductor.structures.checks == 2


@pytest.mark.parametrize("windows,checks", [((32, None, 32), 3), ((32, 32), 1)])
def test_attention_masks_computed_in_the_graph(window_library, windows, checks):
    """Masks the compiled graph computes are Inductor's buffers, which it reuses for later values without
    bumping their version: with a window-32 mask shared by two layers and a full-causal one, Inductor runs both
    window layers first and computes the full-causal mask into the window mask's buffer, the same tensor
    object, so each call checks its mask (a cached answer would run the window kernel on the full-causal
    layer); one computed mask shared by both layers is checked once a forward. Outputs are eager's."""
    tol = attention_tolerance(window_library)
    with net_installed(window_library, windows, 7, computed=True) as (model, x, want, inst):
        with torch.no_grad():
            for _ in range(2):
                got = model(*x)
                for g, w in zip(got, want):
                    assert torch.allclose(g.float(), w.float(), atol=tol["atol"], rtol=tol["rtol"])
        full = windows.count(None)
        assert inst.stats()["hits"] == 2 * (len(windows) - full) and inst.stats()["misses"] == 2 * full, \
            inst.stats()
        assert inst._inductor.structures.checks == 2 * checks


def test_attention_masks_computed_in_graph_mode(window_library):
    """kiln's graph mode runs the traced graph as it is, each computed mask a tensor of its own: its checks stay
    cached, one a mask a forward, where Inductor's buffer reuse makes each call check (the test above): with a
    window-32 mask for two layers and a full-causal one, two checks a forward, the window layers hits and the
    full-causal layer a miss (eager's calls), outputs eager's."""
    tol = attention_tolerance(window_library)
    with net_installed(window_library, (32, None, 32), 7, computed=True, compile="graph") as (model, x, want, inst):
        with torch.no_grad():
            for _ in range(2):
                got = model(*x)
                for g, w in zip(got, want):
                    assert torch.allclose(g.float(), w.float(), atol=tol["atol"], rtol=tol["rtol"])
        assert inst.stats()["hits"] == 4 and inst.stats()["misses"] == 2, inst.stats()
        assert inst._inductor.structures.checks == 4


@pytest.fixture(scope="module")
def nested_library(tmp_path_factory):
    """tests/data/chains/attention_masks.py's attention block, its mask chain (mul, add, softmax, cast) and the
    softmax alone, optimized together on the cpu backend: three entries, each pattern inside the one before."""
    run = capture_cpu(ATT_MASKS_SCRIPT, tmp_path_factory.mktemp("nested"))
    names = ("attention_1x2x256x64_bf16", "chain_mul_add_softmax_to_1x2x256x256_bf16", "softmax_int_1x2x256x256_bf16")
    library = optimize_alone([run / "problems" / n for n in names], tmp_path_factory.mktemp("nested_only"))
    entries = {e["problem"] for e in json.loads((library / "manifest.json").read_text())["entries"]}
    assert entries == set(names), entries
    return library


def test_the_largest_pattern_is_replaced_first(nested_library):
    """With the attention block, its mask chain and its softmax installed together inside torch.compile, the
    block is what replaces each window layer's attention: a pattern replaced first would leave nothing of the
    larger ones to match (the order the entries were installed in put the softmax first)."""
    tol = attention_tolerance(nested_library)
    with net_installed(nested_library, (32, 32), 3) as (model, x, want, inst):
        with torch.no_grad():
            got = model(*x)
        hits = {n: e["hits"] for n, e in inst.stats()["entries"].items()}
        assert hits == {"attention_1x2x256x64_bf16": 2, "chain_mul_add_softmax_to_1x2x256x256_bf16": 0,
                        "softmax_int_1x2x256x256_bf16": 0}, (hits, inst.notes)
        for g, w in zip(got, want):
            assert torch.allclose(g.float(), w.float(), atol=tol["atol"], rtol=tol["rtol"])


def test_eager_attention_blocks_under_no_grad(tmp_path):
    """Under torch.no_grad torch.matmul reaches a dispatch mode as a bmm of 3-D views, which hid HF GPT-2's
    eager attention block (the attention family saw an as_strided of the scores); capture records
    torch.matmul, `@` and Tensor.matmul whole there, as inference_mode does. Swin's window attention slices q,
    k and v from one projection: k's contiguous copy had its head dim outermost (k.transpose(-2, -1) of a
    slice), which the attention family refused; its dense copy now keeps the memory order. GPT-2's block, a
    hand-written one and Swin's are attention problems of 4-D matmuls that the attention family matches and
    proves on the cpu backend."""
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "kiln.capture", str(ROOT / "tests/data/chains/eager_attention.py"),
                        "--out", str(run), "--device", "cpu", "--quiet", "--no-reference"], cwd=ROOT, env=kiln_env(),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    blocks = {p: short(d["kiln"]["members"]) for p, d in chains(run) if d["kiln"].get("pattern") == "attention"}
    scaled = ["matmul.default", "mul.Tensor", "add.Tensor", "_softmax.default", "matmul.default"]
    biased = ["matmul.default", "add.Tensor", "_softmax.default", "matmul.default"]  # Swin scales q before
    # GPT-2's (both layers: one signature) and the hand-written one; Swin's
    assert sorted(map(len, blocks.values())) == [4, 5, 5] and all(m in (scaled, biased) for m in blocks.values()), \
        blocks
    ops = json.loads((run / "model.json").read_text())["ops"]
    names = {o["aten"].split("::")[-1] for o in ops}
    assert "matmul.default" in names and "bmm.default" not in names, sorted(names)
    swin = next(p for p, m in blocks.items() if m == biased)
    layouts = json.loads((swin / "definition.json").read_text())["kiln"]["layouts"]
    assert any(v["stored"] == "contiguous_copy" and v.get("permute") for v in layouts.values()), layouts
    for problem in blocks:
        listed = run_kiln(["sweep", problem, "--backend", "cpu", "--family", "attention", "--list"])
        assert "matches family attention" in listed.stdout + listed.stderr, listed.stderr[-2000:]
        res = prove(problem, "attention", tmp_path / problem.name)
        assert res["outcome"] == "ok" and res["summary"]["proved"] == res["summary"]["workloads"], res
