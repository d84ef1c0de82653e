"""Tests of kiln.reference (python/kiln/reference.py): the reference data the C gate proves kernels against.

The published SOL-ExecBench rmsnorm problem is run unmodified through the command line (its 3 GB of
output go to /dev/shm where there is room, and are removed); a small masked softmax problem
(tests/data/reference/masked_softmax, tensors made here) covers safetensors inputs with -inf and finfo.min
masks, a random input, a scalar, an expr axis, trace-style workload lines and dict outputs; problems made
in the tests cover random scalars, 0-d tensors, scalar outputs and a custom inputs entrypoint; malformed
problems check the exit codes and one-line messages of the command line. The cuda test runs only where
PyTorch sees a GPU.
"""

import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import safetensors  # noqa: E402
import safetensors.torch  # noqa: E402
import torch  # noqa: E402

from kiln import reference as kref  # noqa: E402
from kiln.problem import ProblemError, eval_int_expr, ExprError, load_problem  # noqa: E402

FIXTURES = os.path.join(REPO, "tests", "data", "reference")
RMSNORM_DIR = os.path.normpath(os.path.join(REPO, "..", "shared", "solbench", "rmsnorm_h4096"))


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """The tensors here are small: one thread is faster, and far faster on a busy machine where
    PyTorch's threads wait for each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def fnv1a64_independent(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) % (1 << 64)
    return f"{h:016x}"


def read_set(path):
    return safetensors.torch.load_file(path)


# ---------------------------------------------------------------------------------------------------
# The masked softmax problem: tensors made here.


def make_masked_softmax(dir_path, mask_neg=(float("-inf"), torch.finfo(torch.float32).min)):
    """Copies the fixture to dir_path and writes its safetensors inputs: scores ~ N(3, 2^2); a causal
    mask with -inf (workload 0) or finfo.min (workload 1) above the diagonal."""
    shutil.copytree(os.path.join(FIXTURES, "masked_softmax"), dir_path)
    os.makedirs(os.path.join(dir_path, "tensors"))
    g = torch.Generator().manual_seed(1234)
    real = {}
    for (b, s), neg in zip([(2, 16), (1, 8)], mask_neg):
        scores = torch.randn(b, 2, s, s, generator=g) * 2 + 3
        mask = torch.zeros(s, s).masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), neg)
        safetensors.torch.save_file({"scores": scores, "mask": mask},
                                    os.path.join(dir_path, "tensors", f"b{b}_s{s}.safetensors"))
        real[(b, s)] = {"scores": scores, "mask": mask}
    return real


def masked_softmax(scores, mask, bias, scale):
    """The fixture's computation, written independently of its reference source."""
    z = scores.double() * scale + mask.double() + bias.double()
    z = torch.where(torch.isinf(z) & (z < 0), torch.full_like(z, -torch.inf), z)
    probs = torch.exp(z - z.max(dim=-1, keepdim=True).values)
    probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs, z.max(dim=-1).values.reshape(z.shape[0], -1)


@pytest.fixture
def softmax_problem(tmp_path):
    real = make_masked_softmax(tmp_path / "problem")
    return tmp_path / "problem", real


def test_masked_softmax_sets_keep_masks_stats_and_scalars(softmax_problem, tmp_path):
    problem_dir, real = softmax_problem
    out = tmp_path / "ref"
    manifest = kref.build_reference(str(problem_dir), str(out), n_sets=3, seed=5, time_reference=False)
    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk == manifest
    assert manifest["problem"] == "masked_softmax_h2" and manifest["device"] == "cpu"
    assert [w["axes"] for w in manifest["workloads"]] == [
        {"batch": 2, "heads": 2, "seq": 16, "rows": 32}, {"batch": 1, "heads": 2, "seq": 8, "rows": 16}]

    for k, (entry, (b, s), scale) in enumerate(zip(manifest["workloads"], [(2, 16), (1, 8)], [0.125, 0.5])):
        assert entry["ref_time_us"] is None
        assert [x["kind"] for x in entry["sets"]] == ["real", "random", "random"]
        assert [x["seed"] for x in entry["sets"]] == [5 + 1000 * k + j for j in range(3)]
        assert all(x["scalars"] == {"scale": scale} for x in entry["sets"])
        sets = [read_set(out / x["file"]) for x in entry["sets"]]
        assert set(sets[0]) == {"input.scores", "input.mask", "input.bias", "output.probs", "output.row_max"}

        real_scores, real_mask = real[(b, s)]["scores"], real[(b, s)]["mask"]
        assert torch.equal(sets[0]["input.scores"], real_scores)
        assert torch.equal(sets[0]["input.mask"], real_mask)
        for j in (1, 2):
            scores, mask = sets[j]["input.scores"], sets[j]["input.mask"]
            assert not torch.equal(scores, real_scores)
            assert abs(scores.mean() - real_scores.mean()) < 0.4
            assert abs(scores.std() - real_scores.std()) < 0.4
            assert scores.min() >= real_scores.min() and scores.max() <= real_scores.max()
            # the mask values (-inf or finfo.min) stay exactly where they were
            assert torch.equal(mask, real_mask)
            assert not torch.equal(sets[j]["input.bias"], sets[0]["input.bias"])  # random: redrawn
        for x in sets:
            probs, row_max = masked_softmax(x["input.scores"], x["input.mask"], x["input.bias"], scale)
            assert x["output.probs"].shape == (b, 2, s, s) and x["output.row_max"].shape == (b, 2 * s)
            torch.testing.assert_close(x["output.probs"].double(), probs, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(x["output.row_max"].double(), row_max, rtol=1e-5, atol=1e-5)
    assert (torch.isinf(read_set(out / "w0_s1.safetensors")["input.mask"])).sum() == 16 * 15 // 2


def test_same_seed_same_files_other_seed_other_random_sets(softmax_problem, tmp_path):
    problem_dir, _ = softmax_problem
    runs = {}
    for name, seed in [("a", 11), ("b", 11), ("c", 12)]:
        kref.build_reference(str(problem_dir), str(tmp_path / name), seed=seed, time_reference=False)
        runs[name] = {f: (tmp_path / name / f).read_bytes() for f in sorted(os.listdir(tmp_path / name))}
    assert len(runs["a"]) == 7
    assert runs["a"] == runs["b"]
    assert runs["a"]["w0_s1.safetensors"] != runs["c"]["w0_s1.safetensors"]


def test_overlapped_sets_are_the_same_files(softmax_problem, tmp_path, monkeypatch):
    """Big sets are built overlapped (the next one drawn, the last one written and hashed, while one
    runs): the files and the manifest are byte for byte those of one set after another."""
    problem_dir, _ = softmax_problem
    problem = kref.load_problem(str(problem_dir))
    assert not kref._overlaps(problem, problem.workloads[0], 3)  # kilobytes: one after another
    kref.build_reference(str(problem_dir), str(tmp_path / "one"), seed=11, time_reference=False)
    calls = []
    real_overlaps = kref._overlaps
    monkeypatch.setattr(kref, "OVERLAP_MIN_BYTES", 0)
    monkeypatch.setattr(kref, "_memory_available", lambda: 1 << 50)
    monkeypatch.setattr(kref, "_overlaps", lambda *a: calls.append(real_overlaps(*a)) or calls[-1])
    kref.build_reference(str(problem_dir), str(tmp_path / "overlapped"), seed=11, time_reference=False)
    assert calls and all(calls)
    monkeypatch.setattr(kref, "_memory_available", lambda: 0)  # three sets would not fit
    assert not real_overlaps(problem, problem.workloads[0], 3)
    files = sorted(os.listdir(tmp_path / "one"))
    assert files == sorted(os.listdir(tmp_path / "overlapped")) and len(files) == 7
    for f in files:
        assert (tmp_path / "one" / f).read_bytes() == (tmp_path / "overlapped" / f).read_bytes(), f


def test_default_seed_is_drawn_from_the_os_and_recorded(softmax_problem, tmp_path):
    """Without --seed no one knows the random sets before they are drawn; the manifest records the
    seed, and the same seed draws them again byte for byte. Every set file carries its content
    hash, which is what the gate checks before it uses the file."""
    problem_dir, _ = softmax_problem
    a = kref.build_reference(str(problem_dir), str(tmp_path / "a"), time_reference=False)
    b = kref.build_reference(str(problem_dir), str(tmp_path / "b"), time_reference=False)
    assert a["seed"] != b["seed"]
    assert (tmp_path / "a" / "w0_s1.safetensors").read_bytes() != \
        (tmp_path / "b" / "w0_s1.safetensors").read_bytes()
    again = kref.build_reference(str(problem_dir), str(tmp_path / "c"), seed=a["seed"],
                                 time_reference=False)
    assert again["seed"] == a["seed"]
    for entry in a["workloads"]:
        for s in entry["sets"]:
            data = (tmp_path / "a" / s["file"]).read_bytes()
            assert s["blake2b"] == hashlib.blake2b(data, digest_size=16).hexdigest()
            assert data == (tmp_path / "c" / s["file"]).read_bytes()


def test_reference_is_timed_on_cpu(softmax_problem, tmp_path):
    problem_dir, _ = softmax_problem
    manifest = kref.build_reference(str(problem_dir), str(tmp_path / "ref"), n_sets=1)
    times = [w["ref_time_us"] for w in manifest["workloads"]]
    assert all(isinstance(t, float) and 0 < t < 1e6 for t in times)
    assert all(len(w["sets"]) == 1 for w in manifest["workloads"])


def test_default_out_dir_and_stale_sets_removed(softmax_problem):
    problem_dir, _ = softmax_problem
    out = problem_dir / "kiln" / "ref-cpu"
    kref.build_reference(str(problem_dir), n_sets=3, time_reference=False)
    assert (out / "w1_s2.safetensors").exists()
    kref.build_reference(str(problem_dir), n_sets=2, time_reference=False)
    assert sorted(os.listdir(out)) == ["manifest.json", "w0_s0.safetensors", "w0_s1.safetensors",
                                       "w1_s0.safetensors", "w1_s1.safetensors"]


def write_problem(dir_path, definition, workloads):
    os.makedirs(dir_path)
    with open(os.path.join(dir_path, "definition.json"), "w") as f:
        json.dump(definition, f)
    with open(os.path.join(dir_path, "workload.jsonl"), "w") as f:
        f.writelines(json.dumps(w) + "\n" for w in workloads)


def test_random_scalars_zero_d_tensors_and_scalar_outputs(tmp_path):
    definition = {
        "name": "axpb", "axes": {"n": {"type": "var"}},
        "inputs": {"x": {"shape": ["n"], "dtype": "int32"}, "a": {"shape": None, "dtype": "float32"},
                   "b": {"shape": [], "dtype": "float64"}, "flag": {"shape": None, "dtype": "bool"}},
        "outputs": {"y": {"shape": ["n"], "dtype": "float64"}, "total": {"shape": None, "dtype": "float64"}},
        "reference": "import torch\ndef run(x, a, b, flag):\n    y = x.double() * a + b\n"
                     "    return y, float(y.sum()) if flag else 0.0\n",
    }
    inputs = {"x": {"type": "random"}, "a": {"type": "random"}, "b": {"type": "scalar", "value": 2.5},
              "flag": {"type": "scalar", "value": True}}
    write_problem(tmp_path / "p", definition, [{"uuid": "u0", "axes": {"n": 100}, "inputs": inputs}])
    manifest = kref.build_reference(str(tmp_path / "p"), str(tmp_path / "ref"), time_reference=False)
    sets = manifest["workloads"][0]["sets"]
    scales = [x["scalars"]["a"] for x in sets]
    assert len(set(scales)) == 3 and all(isinstance(v, float) for v in scales)  # random: drawn per set
    assert all(x["scalars"]["flag"] == 1 for x in sets)
    for x, a in zip(sets, scales):
        t = read_set(tmp_path / "ref" / x["file"])
        assert set(t) == {"input.x", "input.b", "output.y", "output.total"}
        assert t["input.b"].shape == () and t["input.b"].item() == 2.5
        assert t["input.x"].dtype == torch.int32 and -1024 <= t["input.x"].min() <= t["input.x"].max() < 1024
        expected = t["input.x"].double() * torch.tensor(a, dtype=torch.float32).item() + 2.5
        assert torch.equal(t["output.y"], expected)
        assert t["output.total"].shape == ()
        assert t["output.total"].item() == pytest.approx(expected.sum().item())


def test_custom_inputs_entrypoint(tmp_path):
    reference = (
        "import torch\n"
        "def make_inputs(axes_and_scalars, device):\n"
        "    n, segments = axes_and_scalars['n'], axes_and_scalars['segments']\n"
        "    cuts = torch.randperm(n - 1)[:segments - 1].add(1).sort().values\n"
        "    offsets = torch.cat([torch.tensor([0]), cuts, torch.tensor([n])]).to(torch.int32)\n"
        "    return {'values': torch.randn(n, device=device), 'offsets': offsets.to(device)}\n"
        "def run(values, offsets):\n"
        "    sums = [values[offsets[i]:offsets[i + 1]].sum() for i in range(len(offsets) - 1)]\n"
        "    return torch.stack(sums)\n")
    definition = {
        "name": "segment_sum", "custom_inputs_entrypoint": "make_inputs",
        "axes": {"n": {"type": "var"}, "segments": {"type": "var"},
                 "n_offsets": {"type": "expr", "expression": "segments + 1"}},
        "inputs": {"values": {"shape": ["n"], "dtype": "float32"},
                   "offsets": {"shape": ["n_offsets"], "dtype": "int32"}},
        "outputs": {"sums": {"shape": ["segments"], "dtype": "float32"}},
        "reference": reference,
    }
    workload = {"uuid": "c0", "axes": {"n": 64, "segments": 5},
                "inputs": {"values": {"type": "custom"}, "offsets": {"type": "custom"}}}
    write_problem(tmp_path / "p", definition, [workload])
    state = torch.random.get_rng_state()
    kref.build_reference(str(tmp_path / "p"), str(tmp_path / "a"), seed=7, time_reference=False)
    kref.build_reference(str(tmp_path / "p"), str(tmp_path / "b"), seed=7, time_reference=False)
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's RNG is left alone
    sets = [read_set(tmp_path / "a" / f"w0_s{j}.safetensors") for j in range(3)]
    assert not torch.equal(sets[0]["input.values"], sets[1]["input.values"])
    for j, t in enumerate(sets):
        assert (tmp_path / "a" / f"w0_s{j}.safetensors").read_bytes() == \
            (tmp_path / "b" / f"w0_s{j}.safetensors").read_bytes()
        off = t["input.offsets"].tolist()
        assert off[0] == 0 and off[-1] == 64 and len(off) == 6
        expected = torch.stack([t["input.values"][off[i]:off[i + 1]].sum() for i in range(5)])
        torch.testing.assert_close(t["output.sums"], expected)


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device here: the cuda path is tested on the GPU machine")
def test_cuda_reference_matches_cpu(softmax_problem, tmp_path):
    problem_dir, _ = softmax_problem
    cpu = kref.build_reference(str(problem_dir), str(tmp_path / "cpu"), device="cpu", seed=3,
                               time_reference=False)
    gpu = kref.build_reference(str(problem_dir), str(tmp_path / "gpu"), device="cuda", seed=3)
    assert gpu["device"] == "cuda"
    for c, g in zip(cpu["workloads"], gpu["workloads"]):
        assert isinstance(g["ref_time_us"], float) and 0 < g["ref_time_us"] < 1e5
        for cs, gs in zip(c["sets"], g["sets"]):
            tc, tg = read_set(tmp_path / "cpu" / cs["file"]), read_set(tmp_path / "gpu" / gs["file"])
            for name in ("input.scores", "input.mask", "input.bias"):
                assert torch.equal(tc[name], tg[name])  # inputs are drawn on the CPU for every device
            torch.testing.assert_close(tg["output.probs"], tc["output.probs"], rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------------
# The published problem, unmodified, through the command line (run by cli_runs, below).


def test_published_rmsnorm(cli_runs):
    if "rmsnorm" not in cli_runs:
        pytest.skip(f"the published SOL-ExecBench problem is not at {RMSNORM_DIR}")
    result, out = cli_runs["rmsnorm"]
    assert result.returncode == 0, result.stderr
    assert "[14/14] workload" in result.stdout

    with open(os.path.join(RMSNORM_DIR, "definition.json"), "rb") as f:
        data = f.read()
    with open(os.path.join(RMSNORM_DIR, "workload.jsonl"), "rb") as f:
        data += f.read()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["key"] == fnv1a64_independent(data)
    assert manifest["kiln_reference"] == 2 and manifest["problem"] == "rmsnorm_h4096"
    assert manifest["torch"] == torch.__version__
    with open(os.path.join(RMSNORM_DIR, "workload.jsonl")) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    assert [w["uuid"] for w in manifest["workloads"]] == [line["uuid"] for line in lines]
    assert len(manifest["workloads"]) == 14

    for entry, line in zip(manifest["workloads"], lines):
        rows = line["axes"]["batch_size"]
        assert entry["axes"] == {"batch_size": rows, "hidden_size": 4096}
        assert [s["kind"] for s in entry["sets"]] == ["real", "random", "random"]
        first_rows = []
        for s in entry["sets"]:
            with safetensors.safe_open(str(out / s["file"]), framework="pt") as f:
                assert sorted(f.keys()) == ["input.hidden_states", "input.weight", "output.output"]
                assert f.get_slice("output.output").get_shape() == [rows, 4096]
                # Big workloads: the first and last 32 rows, read without loading the whole file.
                x_rows, y_rows = f.get_slice("input.hidden_states"), f.get_slice("output.output")
                parts = [slice(0, rows)] if rows <= 256 else [slice(0, 32), slice(rows - 32, rows)]
                x = torch.cat([x_rows[p] for p in parts])
                y = torch.cat([y_rows[p] for p in parts])
                w = f.get_tensor("input.weight")
            assert x.dtype == torch.bfloat16 and y.dtype == torch.bfloat16 and w.shape == (4096,)
            xf = x.double()
            expected = xf / torch.sqrt((xf * xf).mean(dim=-1, keepdim=True) + 1e-5) * w.double()
            torch.testing.assert_close(y.double(), expected, rtol=1.6e-2, atol=1e-2)
            assert abs(x.float().std().item() - 1.0) < 0.05  # `random` inputs are standard normal
            first_rows.append(x[0])
        assert not torch.equal(first_rows[0], first_rows[1]) and not torch.equal(first_rows[1], first_rows[2])


# ---------------------------------------------------------------------------------------------------
# Malformed problems: exit codes and one-line messages.


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _case_missing_definition(d):
    os.remove(os.path.join(d, "definition.json"))


def _case_bad_json(d):
    _write(os.path.join(d, "definition.json"), '{"name": "x", "axes": {')


def _case_unknown_input_type(d):
    path = os.path.join(d, "workload.jsonl")
    with open(path) as f:
        text = f.read()
    _write(path, text.replace('"bias": {"type": "random"}', '"bias": {"type": "zeros"}', 1))


def _case_shape_mismatch(d):
    g = torch.Generator().manual_seed(0)
    safetensors.torch.save_file({"scores": torch.randn(1, 2, 8, 7, generator=g), "mask": torch.zeros(8, 8)},
                                os.path.join(d, "tensors", "b1_s8.safetensors"))


def _case_reference_raises(d):
    path = os.path.join(d, "definition.json")
    with open(path) as f:
        definition = json.load(f)
    definition["reference"] = ("import torch\n\ndef run(scores, mask, bias, scale):\n"
                               "    rows = scores.shape[-1]\n    assert rows == 16, f'rows {rows}'\n"
                               "    return {'probs': scores, 'row_max': scores.amax(-1).flatten(1)}\n")
    _write(path, json.dumps(definition))


def _case_wrong_output_dtype(d):
    path = os.path.join(d, "definition.json")
    with open(path) as f:
        definition = json.load(f)
    definition["outputs"]["probs"]["dtype"] = "bfloat16"
    _write(path, json.dumps(definition))


MALFORMED = {
    # case: (make it bad, expected exit status, fragments the one-line message must contain)
    "missing_definition": (_case_missing_definition, 2, ["definition.json: no such file"]),
    "bad_json": (_case_bad_json, 2, ["definition.json: bad JSON"]),
    "unknown_input_type": (_case_unknown_input_type, 2,
                           ["workload.jsonl:1", "input 'bias'", 'unknown input type "zeros"']),
    "shape_mismatch": (_case_shape_mismatch, 2,
                       ["workload line 2", "input 'scores'", "shape is [1, 2, 8, 7]", "[1, 2, 8, 8]"]),
    "reference_raises": (_case_reference_raises, 1,
                         ["reference failed", "workload line 2", "AssertionError: rows 8",
                          "reference line 5"]),
}
# More error cases, checked through main() in this process (the cases above prove the real process).
MORE_ERRORS = {
    "wrong_output_dtype": (_case_wrong_output_dtype, 1,
                           ["reference failed", "output 'probs'", "dtype is float32", "says bfloat16"]),
    "read_only_problem_dir": (lambda d: os.chmod(d, 0o555), 2, ["not writable", "pass --out"]),
    "bad_sets_argument": (lambda d: None, 2, ["--sets 0: expected 1 to 1000"]),
    "bad_key_argument": (lambda d: None, 2, ["--key 'xyz': expected up to 16 hex digits"]),
}
EXTRA_ARGS = {"read_only_problem_dir": [], "bad_sets_argument": ["--sets", "0"],
              "bad_key_argument": ["--key", "xyz"]}


def scratch_dir_for_gigabytes():
    """A directory for the 3 GB of rmsnorm reference data: in memory (/dev/shm) where there is room,
    so that throwaway data is not written back to disk; else None (use the test's tmp_path)."""
    try:
        st = os.statvfs("/dev/shm")
        if st.f_bavail * st.f_frsize > 8 << 30:
            return tempfile.mkdtemp(prefix="kiln-test-ref-", dir="/dev/shm")
    except OSError:
        pass
    return None


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    """Runs the command line on the published rmsnorm problem and on every malformed problem, all at
    once (the rmsnorm run leaves a core idle much of the time); yields {case: (CompletedProcess, out)}."""
    base = tmp_path_factory.mktemp("cli")
    big = scratch_dir_for_gigabytes() or str(base)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    commands, outs = {}, {}
    if os.path.isfile(os.path.join(RMSNORM_DIR, "definition.json")):
        outs["rmsnorm"] = os.path.join(big, "rmsnorm-ref")
        commands["rmsnorm"] = [RMSNORM_DIR, "--no-time", "--out", outs["rmsnorm"]]
    for name, (make_bad, _, _) in MALFORMED.items():
        d = str(base / name)
        make_masked_softmax(d)
        make_bad(d)
        outs[name] = str(base / f"{name}-ref")
        commands[name] = [d, "--no-time", "--out", outs[name]]
    procs = {name: subprocess.Popen([sys.executable, "-m", "kiln.reference", *args], cwd=REPO, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, args in commands.items()}
    results = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        results[name] = (subprocess.CompletedProcess(commands[name], proc.returncode, stdout, stderr),
                         pathlib.Path(outs[name]))
    try:
        yield results
    finally:
        shutil.rmtree(outs.get("rmsnorm", os.path.join(base, "none")), ignore_errors=True)
        if big != str(base):
            shutil.rmtree(big, ignore_errors=True)


def check_error(status, stderr, out, want_status, fragments):
    assert status == want_status, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    for fragment in fragments:
        assert fragment in lines[0]
    assert not (out / "manifest.json").exists()  # a failed run leaves no manifest behind


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_problem(cli_runs, case):
    result, out = cli_runs[case]
    _, want_status, fragments = MALFORMED[case]
    check_error(result.returncode, result.stderr, out, want_status, fragments)


@pytest.mark.parametrize("case", sorted(MORE_ERRORS))
def test_more_errors_through_main(tmp_path, capsys, case):
    make_bad, want_status, fragments = MORE_ERRORS[case]
    problem_dir, out = tmp_path / "problem", tmp_path / "ref"
    make_masked_softmax(problem_dir)
    make_bad(problem_dir)
    args = [str(problem_dir), "--no-time", "--out", str(out)]
    if case in EXTRA_ARGS:
        args = [str(problem_dir), "--no-time", *EXTRA_ARGS[case]]
        out = problem_dir / "kiln" / "ref-cpu"
    try:
        status = kref.main(args)
    finally:
        os.chmod(problem_dir, 0o755)
    check_error(status, capsys.readouterr().err, out, want_status, fragments)


# ---------------------------------------------------------------------------------------------------
# Pieces.


def test_fnv1a64_known_values():
    assert kref.fnv1a64_hex(b"") == "cbf29ce484222325"
    assert kref.fnv1a64_hex(b"a") == "af63dc4c8601ec8c"
    assert kref.fnv1a64_hex(b"foobar") == "85944171f73967e8"


def test_axis_expressions_are_evaluated_safely():
    assert eval_int_expr("hidden // heads + ceil_div(hidden, 3) - -1", {"hidden": 4096, "heads": 32}) == 1495
    assert eval_int_expr("a / 2", {"a": 7}) == 3  # floor division, as in kiln's C evaluator
    for bad in ["__import__('os').system('true')", "a.real", "[a]", "2 ** 99", "a // 0", "b"]:
        with pytest.raises(ExprError):
            eval_int_expr(bad, {"a": 7})


def test_problem_errors_name_the_place(softmax_problem):
    problem_dir, _ = softmax_problem
    path = problem_dir / "workload.jsonl"
    lines = path.read_text().splitlines()
    path.write_text(lines[0].replace('"seq": 16', '"seq": 16, "heads": 3') + "\n")
    with pytest.raises(ProblemError, match=r"workload.jsonl:1 .*'heads' is const 2"):
        load_problem(str(problem_dir))
    path.write_text(lines[0].replace('"batch": 2, ', ""))
    with pytest.raises(ProblemError, match=r"var axis 'batch' is not bound"):
        load_problem(str(problem_dir))
    path.write_text(lines[1].replace('"masked_softmax_h2"', '"other"'))
    with pytest.raises(ProblemError, match=r"'definition' is \"other\""):
        load_problem(str(problem_dir))


def test_random_like_stats_floats_keep_specials_sign_and_range():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(64, 256, generator=g) * 4 + 1  # all positive, in [1, 5]
    x[0, :5] = torch.tensor([float("nan"), float("inf"), float("-inf"), torch.finfo(torch.float32).min, -1e5])
    x = x.to(torch.bfloat16)
    y = kref.random_like_stats(x, torch.Generator().manual_seed(1))
    assert y.dtype == x.dtype and y.shape == x.shape
    special = torch.zeros_like(x, dtype=torch.bool)
    special[0, :5] = True
    assert torch.isnan(y[0, 0]) and torch.equal(y[0, 1:5], x[0, 1:5])
    regular, real = y[~special].float(), x[~special].float()
    assert not torch.isnan(regular).any() and not torch.isinf(regular).any()
    assert regular.min() >= real.min() and regular.max() <= real.max()
    assert abs(regular.mean() - real.mean()) < 0.05 and abs(regular.std() - real.std()) < 0.1
    assert not torch.equal(regular, real)


def test_random_like_stats_integers_bool_and_constants():
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(3, 9, (5000,), generator=g, dtype=torch.int32)
    y = kref.random_like_stats(idx, g)
    assert y.dtype == torch.int32 and y.min() == 3 and y.max() == 8
    b = torch.rand(1000, generator=g) > 0.5
    yb = kref.random_like_stats(b, g)
    assert yb.dtype == torch.bool and 300 < int(yb.sum()) < 700
    ones = torch.ones(16, dtype=torch.float16)
    assert torch.equal(kref.random_like_stats(ones, g), ones)


def test_random_inputs_follow_sol_execbench_distributions():
    g = torch.Generator().manual_seed(0)
    f = kref.random_tensor((4096,), "bfloat16", g).float()
    assert abs(f.mean()) < 0.1 and abs(f.std() - 1) < 0.1
    i8, i32 = kref.random_tensor((4096,), "int8", g), kref.random_tensor((4096,), "int32", g)
    assert i8.min() < -100 and i8.max() > 100
    assert -1024 <= i32.min() < -900 and 900 < i32.max() < 1024
    f8 = kref.random_tensor((4096,), "float8_e4m3fn", g).float()
    assert f8.abs().max() <= 2.0


# ---------------------------------------------------------------------------------------------------
# Inputs drawn from statistics alone (kiln.capture_stats): the structure capture detects comes back.


def _roundtrip(t, seed=1):
    from kiln.capture_stats import draw, summarize
    summary = json.loads(json.dumps(summarize(t), allow_nan=False))  # what the workload line carries
    return summary, draw(summary, tuple(t.shape), t.dtype, torch.Generator().manual_seed(seed),
                         torch.device("cpu"))


def test_drawn_float_keeps_range_moments_zeros_and_specials():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 256, generator=g) * 2 + 0.5
    x = torch.where(torch.rand(256, 256, generator=g) < 0.3, torch.zeros(()), x)  # relu-like zeros
    x[0, :10] = float("nan")
    x[1, :20] = torch.finfo(torch.bfloat16).min
    summary, y = _roundtrip(x.to(torch.bfloat16))
    stats = summary["stats"]
    assert stats["dtype"] == "bfloat16" and "structure" not in summary
    assert stats["zeros"] == pytest.approx(float((x == 0).float().mean()), abs=1e-3)
    assert stats["nan"] == pytest.approx(10 / x.numel()) and stats["masked"] == pytest.approx(20 / x.numel())
    assert y.dtype == torch.bfloat16 and y.shape == x.shape
    yf = y.float()
    regular = yf[torch.isfinite(yf) & (yf > -1e4)]
    assert regular.min() >= stats["min"] - 1e-2 and regular.max() <= stats["max"] + 1e-2
    assert float((yf == 0).float().mean()) == pytest.approx(stats["zeros"], abs=0.02)
    nz = regular[regular != 0]
    assert float(nz.mean()) == pytest.approx(stats["mean_nonzero"], abs=0.05)
    assert float(nz.std()) == pytest.approx(stats["std_nonzero"], rel=0.05)
    assert 0 < int(torch.isnan(yf).sum()) < 60 and 0 < int((yf <= -1e4).sum()) < 90


@pytest.mark.parametrize("lower, upper, name", [(None, 0, "causal"), (-15, 0, "sliding_window"),
                                                (None, 32, "causal")])
def test_drawn_masks_keep_their_band(lower, upper, name):
    from kiln.capture_stats import band_mask
    masked = band_mask(64, 96, lower, upper, "cpu")
    scores = torch.randn(2, 4, 64, 96).masked_fill(masked, float("-inf"))             # additive, in scores
    additive = torch.zeros(1, 1, 64, 96).masked_fill(masked, torch.finfo(torch.float16).min).half()
    keep = (~masked).expand(2, 1, 64, 96).contiguous()                                  # bool, True = attend
    for t in (scores, additive, keep):
        summary, y = _roundtrip(t)
        assert summary["structure"]["kind"] == "band" and summary["structure"]["name"] == name
        assert (summary["structure"]["lower"], summary["structure"]["upper"]) == (lower, upper)
        got = ~y if y.dtype == torch.bool else (y.float() <= -1e4) | torch.isneginf(y.float())
        assert torch.equal(got, masked.expand(t.shape)), t.dtype
    assert torch.equal(_roundtrip(additive)[1][..., masked], additive[..., masked])  # the same fill value
    padded = scores.clone()
    padded[1, :, :, :3] = float("-inf")  # left padding in one batch only: not one band
    assert "structure" not in _roundtrip(padded)[0]


def test_exact_band_is_recorded_drawn_and_checked():
    """A mask whose kept values are all 0 (as models build causal and window masks) is exactly its band: the
    structure says "inside": 0, a draw keeps the zeros, and band_holds(inside_zero=True) (what install checks
    for a kernel that generates the band and reads no mask) holds for it alone: not for scores masked by the
    same band, nor for a narrower window, which band_holds without inside_zero admits; a boolean mask that is
    True exactly in the band is one too."""
    from kiln.capture_stats import band_holds, band_mask
    masked = band_mask(64, 96, -15, 0, "cpu")
    exact = torch.zeros(1, 1, 64, 96).masked_fill(masked, torch.finfo(torch.bfloat16).min).to(torch.bfloat16)
    summary, y = _roundtrip(exact)
    assert summary["structure"]["inside"] == 0 and torch.equal(y, exact)
    scores = torch.randn(1, 1, 64, 96).masked_fill(masked, float("-inf"))
    assert "inside" not in _roundtrip(scores)[0]["structure"]
    assert band_holds(exact, -15, 0, inside_zero=True) and band_holds(exact, -20, 0, inside_zero=True) is False
    assert band_holds(scores, -15, 0) and not band_holds(scores, -15, 0, inside_zero=True)
    narrower = torch.zeros(1, 1, 64, 96).masked_fill(band_mask(64, 96, -7, 0, "cpu"), float("-inf"))
    assert band_holds(narrower, -15, 0) and not band_holds(narrower, -15, 0, inside_zero=True)
    # a boolean mask (True takes part) is exactly its band when True is the band: it takes part as 0 would
    assert band_holds(~masked, -15, 0, inside_zero=True)
    keep_narrower = ~band_mask(64, 96, -7, 0, "cpu")
    assert band_holds(keep_narrower, -15, 0) and not band_holds(keep_narrower, -15, 0, inside_zero=True)
    assert _roundtrip(~masked)[0]["structure"]["inside"] == 0


def test_exact_band_assumption_is_parsed_and_checked_per_tensor():
    """An entry whose kernel assumes an exact band ("inside": 0) is checked with inside_zero, and the cache does not
    answer one kind of check with the other's result, but keeps both answers (two entries that assume different
    bands of one mask do not read it in turns); an "inside" other than 0 is an assumption kiln cannot check (not
    installed)."""
    from types import SimpleNamespace

    from kiln.capture_stats import band_mask
    from kiln.install_assumes import StructureCache, checks_of
    from kiln.install_gate import _Unsupported
    band = {"kind": "band", "lower": -15, "upper": 0}
    entry = SimpleNamespace(inputs=[{"name": "q"}, {"name": "mask"}],
                            assumes={"mask": {"structure": dict(band, inside=0)}})
    assert checks_of(entry) == [(1, -15, 0, True)]
    entry.assumes = {"mask": {"structure": band}}
    assert checks_of(entry) == [(1, -15, 0, False)]
    entry.assumes = {"mask": {"structure": dict(band, inside=1)}}
    with pytest.raises(_Unsupported):
        checks_of(entry)
    masked = band_mask(64, 96, -15, 0, "cpu")
    scores = torch.randn(1, 1, 64, 96).masked_fill(masked, float("-inf"))  # the band, values inside it
    cache = StructureCache()
    assert cache.holds(scores, -15, 0) and not cache.holds(scores, -15, 0, inside_zero=True)
    assert not cache.holds(scores, -15, 0, inside_zero=True) and cache.checks == 2  # the same check: cached
    assert cache.holds(scores, -15, 0) and cache.checks == 2  # the other kind: its own answer, kept
    assert not cache.holds(scores, -15, 0, inside_zero=True) and cache.checks == 2
    assert not cache.holds(scores, -7, 0) and cache.checks == 3  # another band: read
    scores.add_(0)  # written in place: every answer is read again
    assert cache.holds(scores, -15, 0) and cache.checks == 4


def test_drawn_one_hot_and_index_sets():
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 10, (300,), generator=g)
    one_hot = torch.nn.functional.one_hot(labels, 10).float()
    summary, y = _roundtrip(one_hot)
    assert summary["structure"] == {"kind": "one_hot"}
    assert torch.equal(y.sum(-1), torch.ones(300)) and set(y.unique().tolist()) == {0.0, 1.0}
    positions = torch.arange(5, 133).expand(4, 128).contiguous()
    summary, y = _roundtrip(positions)
    assert summary["structure"] == {"kind": "arange", "start": 5} and torch.equal(y, positions)
    perm = torch.randperm(1000, generator=g).to(torch.int32) + 7
    summary, y = _roundtrip(perm)
    assert summary["structure"] == {"kind": "permutation"}
    assert y.dtype == torch.int32 and torch.equal(torch.sort(y).values, torch.arange(7, 1007, dtype=torch.int32))
    picks = torch.randperm(50000, generator=g)[:700]
    summary, y = _roundtrip(picks)
    assert summary["structure"] == {"kind": "distinct", "sorted": False}
    assert y.unique().numel() == 700 and y.min() >= picks.min() and y.max() <= picks.max()
    offsets = torch.sort(torch.randint(0, 4096, (257,), generator=g)).values
    summary, y = _roundtrip(offsets)
    assert summary["structure"] == {"kind": "sorted"} and bool((y[1:] >= y[:-1]).all())
    ids = torch.randint(-3, 40, (64, 64), generator=g)
    summary, y = _roundtrip(ids)
    assert "structure" not in summary and (summary["stats"]["min"], summary["stats"]["max"]) == (-3, 39)
    assert y.min() >= -3 and y.max() <= 39 and y.unique().numel() > 40


def test_drawn_input_set_zero_holds_the_real_slice(tmp_path):
    """A workload input of type random with kiln.drawn: set 0 has the real slice in its leading elements
    and a draw after it; the other sets are draws; a seed gives the same set again."""
    from kiln.capture_stats import summarize
    real = torch.randn(16, 32) * 5
    entry = summarize(real)
    entry["slice"] = {"path": "slice.safetensors", "tensor_key": "x", "elements": 64}
    safetensors.torch.save_file({"x": real.reshape(-1)[:64].clone()}, str(tmp_path / "slice.safetensors"))
    (tmp_path / "definition.json").write_text(json.dumps({
        "name": "scale", "axes": {"r": {"type": "const", "value": 16}, "c": {"type": "const", "value": 32}},
        "inputs": {"x": {"shape": ["r", "c"], "dtype": "float32"}},
        "outputs": {"y": {"shape": ["r", "c"], "dtype": "float32"}},
        "reference": "import torch\ndef run(x):\n    return x * 2\n"}))
    (tmp_path / "workload.jsonl").write_text(json.dumps({
        "uuid": "w0", "axes": {}, "inputs": {"x": {"type": "random"}},
        "kiln": {"set": "real", "drawn": {"x": entry}}}) + "\n")
    manifest = kref.build_reference(str(tmp_path), out_dir=str(tmp_path / "ref"), n_sets=3, seed=5)
    sets = [read_set(tmp_path / "ref" / s["file"])["input.x"] for s in manifest["workloads"][0]["sets"]]
    assert torch.equal(sets[0].reshape(-1)[:64], real.reshape(-1)[:64])
    assert not torch.equal(sets[1].reshape(-1)[:64], real.reshape(-1)[:64])
    for x in sets:
        assert x.min() >= real.min() and x.max() <= real.max() and abs(float(x.std()) - 5) < 1.0
    again = kref.build_reference(str(tmp_path), out_dir=str(tmp_path / "ref2"), n_sets=3, seed=5)
    assert torch.equal(read_set(tmp_path / "ref2" / again["workloads"][0]["sets"][1]["file"])["input.x"], sets[1])
    bad = json.loads((tmp_path / "workload.jsonl").read_text())
    bad["kiln"]["drawn"]["x"]["slice"]["elements"] = 0
    (tmp_path / "workload.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(ProblemError, match="kiln.drawn"):
        load_problem(str(tmp_path))


def test_random_sets_keep_the_indices_a_constraint_reads():
    """FlashInfer's paged problems tie qo_indptr and kv_indptr to the axes (`total_q == qo_indptr[-1].item()`),
    and the page ids and last pages' lengths to them: a random set keeps every integer tensor of such a
    definition and redraws q and the caches. A definition without such constraints keeps redrawing them."""
    d = os.path.join(REPO, "tests", "data", "solbench", "gqa_paged_prefill_causal_h4_kv2_d64_ps16")
    problem = load_problem(str(d))
    tables = {"qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_len"}
    assert kref.constrained_inputs(problem) == tables
    w = problem.workloads[0]
    real = kref.materialize_inputs(problem, w, seed=0)
    other = kref.random_set_inputs(problem, w, real, seed=1)
    for name in tables:
        assert torch.equal(other[name], real[name])
    assert not torch.equal(other["q"], real["q"])
    problem.constraints = []
    assert kref.constrained_inputs(problem) == set()
