"""test_cli.py: kiln's one command-line surface. Every command that `kiln --help` lists (so a new command is
walked too) has a --help with the same parts in the same order, `kiln help CMD` prints the same, an unknown
option is one line on stderr and status 2; the options several commands share have one bound (the same
message everywhere); `kiln -V` / `--version` print the version; bad invocations get one clear line."""
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
KILN = ROOT / "build" / "kiln"
pytestmark = pytest.mark.skipif(not KILN.exists(), reason="build/kiln is missing: run make first")
sys.path.insert(0, str(ROOT / "python"))

import kiln as kiln_package  # noqa: E402


def kiln(*args):
    env = dict(os.environ)
    env.setdefault("KILN_PYTHON", sys.executable)  # capture, run and tune are Python
    return subprocess.run([str(KILN), *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=env)


def listed_commands() -> list:
    """The commands of `kiln --help`'s "commands:" section."""
    text = kiln("--help").stdout
    section = text.split("\ncommands:\n", 1)[1].split("\n\n", 1)[0]
    return [line.split()[0] for line in section.splitlines() if line.strip()]


COMMANDS = listed_commands() if KILN.exists() else []
# commands whose output is data: each has --json (serve serves, run runs a script)
DATA_COMMANDS = {"eval", "capture", "sweep", "optimize", "tune", "submit", "llm-try"}


def test_top_level_help_lists_commands():
    r = kiln("--help")
    assert r.returncode == 0
    assert set(COMMANDS) >= {"eval", "capture", "sweep", "optimize", "submit", "llm-try", "serve", "run", "tune"}
    assert r.stdout.startswith("usage: kiln COMMAND")
    assert kiln("help").stdout == r.stdout


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version(flag):
    r = kiln(flag)
    assert r.returncode == 0
    assert r.stdout == f"kiln {kiln_package.__version__}\n"


def help_sections(cmd: str, text: str) -> dict:
    """Splits a command's help into its parts, checking their order and form."""
    parts = text.rstrip("\n").split("\n\n")
    assert len(parts) == 5, f"kiln {cmd} --help has {len(parts)} parts, not usage/about/options/exit/example"
    usage, about, options, status, example = parts
    lines = usage.splitlines()
    assert lines[0].startswith(f"usage: kiln {cmd} ")
    assert all(line.startswith(f"       kiln {cmd} ") for line in lines[1:])
    assert about.strip() and not about.startswith(" ") and len(about.split()) >= 8, "a one-paragraph description"
    assert options.startswith("options:\n")
    opt_lines = options.splitlines()[1:]
    assert opt_lines[-1].startswith("  -h, --help")
    assert all(line.startswith("  -") or line.startswith(" " * 24) for line in opt_lines), options
    assert status.startswith("exit status:\n")
    codes = [line for line in status.splitlines()[1:] if not line.startswith(" " * 6)]
    assert codes and all(re.match(r"^  (\d+|N) +\S", line) for line in codes), status
    ex = example.splitlines()
    assert ex[0] == "example:" and len(ex) == 2 and ex[1].startswith(f"  kiln {cmd} "), example
    names = re.findall(r"^  (--[a-z][a-z0-9-]*)", options, re.M)
    return {"options": options, "names": names, "codes": codes}


@pytest.mark.parametrize("cmd", COMMANDS)
def test_help_has_the_parts(cmd):
    r = kiln(cmd, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    parts = help_sections(cmd, r.stdout)
    assert ("--json" in parts["names"]) == (cmd in DATA_COMMANDS), f"kiln {cmd}: --json on data commands only"


@pytest.mark.parametrize("cmd", COMMANDS)
def test_help_command_is_dash_help(cmd):
    a, b = kiln("help", cmd), kiln(cmd, "--help")
    assert a.returncode == b.returncode == 0
    assert a.stdout == b.stdout
    assert kiln(cmd, "-h").stdout == b.stdout


@pytest.mark.parametrize("cmd", COMMANDS)
def test_unknown_option_is_one_line(cmd):
    r = kiln(cmd, "--no-such-option")
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"kiln {cmd}: unknown option '--no-such-option'; see kiln {cmd} --help")


def test_unknown_commands_and_top_level_options():
    for args, line in [(["frobnicate"], "kiln: unknown command 'frobnicate'; see kiln --help"),
                       (["help", "frobnicate"], "kiln: unknown command 'frobnicate'; see kiln --help"),
                       (["--frobnicate"], "kiln: unknown option '--frobnicate'; see kiln --help")]:
        r = kiln(*args)
        assert r.returncode == 2 and r.stderr.splitlines() == [line]


# Values out of bounds for options that several commands share: every command that lists the option says
# the same after "kiln CMD: ", because the bound is declared once (src/cli/options.c).
SHARED_BAD_VALUES = [("--iters", "0"), ("--iters", "100001"), ("--sets", "1001"), ("--timeout", "0"),
                     ("--seed", "-1"), ("--seed", "0x"), ("--backend", "tpu"), ("--json", "=x"),
                     ("--llm-retries", "11"), ("--llm-timeout", "0"), ("--llm-url", "x:1"),
                     ("--llm-key-env", "KEY=sk-123"), ("--llm-temperature", "2.5")]


def test_shared_options_have_one_bound():
    helps = {cmd: help_sections(cmd, kiln(cmd, "--help").stdout) for cmd in COMMANDS}
    for opt, value in SHARED_BAD_VALUES:
        users = [cmd for cmd, h in helps.items() if opt in h["names"]]
        assert len(users) >= 2, f"{opt} is shared by {users}"
        said = set()
        for cmd in users:
            args = [opt + value] if value.startswith("=") else [opt, value]
            r = kiln(cmd, *args)
            assert r.returncode == 2, (cmd, opt, value, r.stderr)
            lines = r.stderr.splitlines()
            assert len(lines) == 1 and lines[0].startswith(f"kiln {cmd}: "), (cmd, r.stderr)
            said.add(lines[0][len(f"kiln {cmd}: "):].replace(f"kiln {cmd} ", "kiln CMD "))
        assert len(said) == 1, f"{opt} {value}: {said}"
    # the bounds printed in the help are the same wherever the option means the same
    for opt in ("--iters", "--sets", "--timeout", "--llm-retries", "--llm-token-budget"):
        texts = set()
        for cmd, h in helps.items():
            m = re.search(rf"^  {opt} .*?(?=^  -)", h["options"], re.M | re.S)
            if m:
                texts.add(" ".join(m.group(0).split()))
        assert len(texts) == 1, texts


def valid_value(block: str):
    """A value the help of one option says it takes (its lower bound, a choice, ...); None: a flag."""
    block = " ".join(block.split())
    label = block.split()[0:2]
    m = re.search(r"an integer in \[(-?\d+), ", block) or re.search(r"a number in [\[(]([\d.]+), ([\d.]+)\]", block)
    if m:
        return m.group(m.lastindex) if "a number" in m.group(0) else m.group(1)
    if "unsigned 64-bit" in block:
        return "0x10"
    if "one of " in block:
        return re.search(r"one of ([a-z]+)", block).group(1)
    if label[0] == "--backend":
        return "cpu"
    if label[0] == "--parent":
        return "root"
    if label[0] == "--family":
        return "gen"
    if label[0] == "--llm-url":
        return "http://127.0.0.1:1/v1"
    return "x" if len(label) > 1 and not label[1].startswith("(") and label[1].isupper() else None


@pytest.mark.parametrize("cmd", ["eval", "sweep", "optimize", "submit", "llm-try", "serve"])
def test_every_option_takes_a_valid_value(cmd):
    """Every row a C command lists parses a value its help allows, into its field (options.c asserts that
    each row's kind fits the field it writes), and the command goes on to its operands."""
    options = help_sections(cmd, kiln(cmd, "--help").stdout)["options"]
    args = []
    for block in re.findall(r"^  (--.*?)(?=^  -)", options, re.M | re.S):
        name = block.split()[0]
        if name.endswith("[=PORT]"):
            args.append(name.replace("[=PORT]", "=0"))
            continue
        value = valid_value(block)
        args += [name] if value is None else [name, value]
    r = kiln(cmd, *args)
    assert r.returncode == 2 and re.match(rf"kiln {cmd}: expected (one )?[A-Z]", r.stderr), (args, r.stderr)


def test_llm_options_in_bounds_are_taken():
    """The --llm-* rows accept what their bounds allow: parsing goes on to the operands."""
    r = kiln("llm-try", "--llm-url", "http://x:1/v1", "--llm-retries", "3", "--llm-retries", "0",
             "--llm-token-budget", "5000", "--llm-key-env", "MY_KEY", "--llm-backoff", "30",
             "--llm-temperature", "0", "--llm-max-reply", "1024", "--llm-feedback", "64")
    assert r.returncode == 2 and r.stderr.startswith("kiln llm-try: expected RUN PROBLEM"), r.stderr
    for cmd in ("optimize", "llm-try"):
        r = kiln(cmd, "--llm-backoff", "30.5")
        assert r.returncode == 2 and "--llm-backoff wants a number in [0, 30]" in r.stderr
    # the agent is optional: commands that do not run it know none of its options
    for cmd, opt in [("submit", "--llm-url"), ("eval", "--llm-model"), ("llm-try", "--budget")]:
        r = kiln(cmd, opt, "3")
        assert r.returncode == 2 and f"unknown option '{opt}'" in r.stderr
    # an --llm-* option without an endpoint is refused where the agent is optional
    r = kiln("optimize", "runs/none", "--llm-retries", "3")
    assert r.returncode == 2 and "--llm-retries needs --llm-url" in r.stderr


def test_seed_takes_decimal_and_hex():
    for value in ("0", "18446744073709551615", "0x6b696c6e", "0XFF"):
        r = kiln("sweep", "--seed", value)
        assert r.returncode == 2 and "expected one PROBLEM_DIR" in r.stderr, (value, r.stderr)
    for value in ("18446744073709551616", "1e3", "0x1g", "", " 1"):
        r = kiln("sweep", "--seed", value)
        assert r.returncode == 2 and "--seed wants an unsigned 64-bit integer" in r.stderr, (value, r.stderr)


def test_ambiguous_and_malformed_options():
    r = kiln("eval", "--s", "1")
    assert r.returncode == 2 and r.stderr.splitlines() == [
        "kiln eval: ambiguous option '--s' (--sets, --seed); see kiln eval --help"]
    r = kiln("eval", "--iters")
    assert r.returncode == 2 and r.stderr.splitlines() == ["kiln eval: --iters wants a value; see kiln eval --help"]
    r = kiln("eval", "--json=1")
    assert r.returncode == 2 and r.stderr.splitlines() == ["kiln eval: --json takes no value; see kiln eval --help"]


def test_sweep_list_json():
    problem = "tests/data/problems/softmax_f32"
    text = kiln("sweep", problem, "--backend", "cpu", "--list")
    r = kiln("sweep", problem, "--backend", "cpu", "--list", "--json")
    assert r.returncode == 0 and text.returncode == 0, r.stderr
    listed = json.loads(r.stdout)
    assert listed["problem"] == "softmax_f32"
    families = {f["family"]: f for f in listed["families"]}
    assert "softmax" in families
    f = families["softmax"]
    assert 0 < f["valid"] <= f["space"] and f["start"] and f["start_from"] in ("rule", "first_valid")
    line = next(ln for ln in text.stdout.splitlines() if "family softmax " in ln)
    assert f"space {f['space']} points, {f['valid']} valid; starts at {f['start']}" in line
    # --where counts the valid points with those parameter values: the first parameter's first value
    name, value = f["start"].split()[0].split("=")
    r = kiln("sweep", problem, "--backend", "cpu", "--list", "--json", "--where", f"{name}={value}")
    assert r.returncode == 0, r.stderr
    picked = {g["family"]: g for g in json.loads(r.stdout)["families"]}["softmax"]
    assert 0 < picked["selected"] < f["valid"]


def test_sweep_where_runs_the_start_points_twin_first(tmp_path):
    """--where that the start point fails runs its twin first: the start point with the filtered value
    put in (the change measured against the rule's point), not whatever an even spread lands on."""
    problem = "tests/data/problems/softmax_f32"
    listed = json.loads(kiln("sweep", problem, "--backend", "cpu", "--list", "--json").stdout)
    start = dict(kv.split("=") for kv in listed["families"][0]["start"].split())
    assert start["SMX_THREADS"] != "512", start
    r = kiln("sweep", problem, "--backend", "cpu", "--family", "softmax", "--where", "SMX_THREADS=512",
             "--limit", "2", "--iters", "2", "--json", "--ref-dir", tmp_path / "ref", "--out", tmp_path / "src")
    assert r.returncode == 0, r.stderr
    assert "the family's start point first" in r.stderr, r.stderr
    first = dict(kv.split("=") for kv in json.loads(r.stdout)["rows"][0]["params"].split())
    assert first == {**start, "SMX_THREADS": "512"}, (first, start)


@pytest.mark.parametrize("args,message", [
    (["eval"], "expected PROBLEM_DIR and KERNEL_FILE"),
    (["eval", "tests/data/problems/softmax_f32", "no/such/kernel.c"], "cannot read the kernel file"),
    (["eval", "no/such/problem", "tests/kernels/cpu/good_softmax.c"], "no/such/problem"),
    (["eval", "tests/data/problems/softmax_f32", "tests/kernels/cpu/good_softmax.c", "--backend", "tpu"],
     "unknown backend 'tpu'"),
    (["eval", "tests/data/problems/softmax_f32", "tests/kernels/cpu/good_softmax.c", "--iters", "0"],
     "--iters wants an integer"),
    (["sweep"], "expected one PROBLEM_DIR"),
    (["sweep", "tests/data/problems/softmax_f32", "--family", "nonesuch"], "unknown family 'nonesuch'"),
    (["sweep", "tests/data/problems/softmax_f32", "--resume"], "--resume reads the rows of --jsonl FILE"),
    (["sweep", "tests/data/problems/softmax_f32", "--sample", "sideways"], "--sample wants one of even|random"),
    (["sweep", "tests/data/problems/softmax_f32", "--where", "sideways"], "--where: 'sideways' is not NAME=V"),
    (["serve"], "expected one RUN directory"),
    (["submit", "a", "b"], "expected RUN PROBLEM KERNEL_FILE"),
    (["llm-try", "a", "b", "--parent", "latest"], "--parent wants incumbent, root or a candidate id"),
    (["optimize", "--serve=70000"], "--serve wants an integer in [0, 65535]"),
    (["capture", "--out", "x"], "required"),
    (["tune", "x.py", "--rounds", "0"], "--rounds wants an integer >= 1"),
    (["run", "--library"], "--library wants a value"),
])
def test_bad_invocations(args, message):
    r = kiln(*args)
    assert r.returncode == 2
    assert message in r.stderr
    assert r.stderr.startswith(f"kiln {args[0]}: ")
    assert len(r.stderr.splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr


TINY = "tests/data/install/tiny_model.py"  # prints one line "tiny model ...: forward ... ms, checksum ..."


def test_capture_json_leaves_stdout_to_the_json(tmp_path):
    """capture --json: stdout is capture.json and nothing else; the script's own output goes to stderr."""
    run = tmp_path / "run"
    r = kiln("capture", TINY, "--out", run, "--device", "cpu", "--no-reference", "--top", 1, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    printed = json.loads(r.stdout)
    assert printed == json.loads((run / "capture.json").read_text())
    assert printed["kiln_capture"] == 1 and printed["device"] == "cpu"
    assert "tiny model " in r.stderr


def test_tune_json_leaves_stdout_to_the_report(tmp_path):
    """tune --json: stdout is report.json even when a step fails (a library that libkiln_rt refuses)."""
    lib = tmp_path / "library"
    lib.mkdir()
    (lib / "manifest.json").write_text("{}")
    run = tmp_path / "run"
    r = kiln("tune", TINY, "--backend", "cpu", "--out", run, "--library", lib, "--json")
    printed = json.loads(r.stdout)
    assert printed == json.loads((run / "report.json").read_text())
    assert printed["kiln_report"] == 1 and "refused" in printed["library"]
    assert "tiny model " in r.stderr and "kiln tune [3/4]" in r.stderr
