"""kiln run: runs an unmodified PyTorch script with a kiln library installed.

    kiln run [options] SCRIPT.py [SCRIPT ARGS...]     (`kiln run --help` lists them)

The library is --library, else $KILN_LIBRARY; it may be RUN/library or RUN. Everything from SCRIPT.py on
belongs to the script, which runs as __main__ with sys.argv = [SCRIPT, *args] and its own directory first on
sys.path, as `python SCRIPT args` would run it. A library that libkiln_rt refuses (another device, another
kiln build, a damaged manifest or kernel) is reported on stderr and the script runs eagerly, unchanged.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Optional

from kiln.cli import UsageError, format_help
from kiln.install_runtime import RUN_MODES

OPTIONS = [  # (flag, value name or None, help): the options come before the script
    ("--library", "DIR", "the library: RUN/library or RUN (default: $KILN_LIBRARY)"),
    ("--entries", "all|NAME,...", "the entries to install (default: those worth it: what kiln tune decided, else "
     "those whose kernel beat eager in the gate by more than kiln's dispatch cost; all: every usable one)"),
    ("--strict", None, "exit 1 instead of running eagerly when libkiln_rt refuses the library"),
    ("--mode", "auto|eager|graph|compile", "how the model runs: eager (kiln's kernels through PyTorch's "
     "dispatcher, no graph), graph (--graph), compile (--compile); auto (the default): the way kiln tune timed "
     "fastest on this model (the library's install.json), else eager"),
    ("--compile", None, "--mode compile: torch.compile the script's model (each root module at its first call) "
     "with kiln's kernels inside the compiled graphs, as if the script compiled it itself"),
    ("--graph", None, "--mode graph, kiln's graph mode: each root module is captured by dynamo at its first call "
     "and its graphs run with PyTorch's own kernels, kiln's chains (an attention block, a norm + activation + "
     "residual) replaced in them; no Inductor (python/kiln/install_graph.py)"),
    ("--stats", None, "print the installation and its hits and misses on stderr when the script ends"),
    ("--stats-json", "PATH", "write the installation and its hits and misses to PATH as JSON"),
]


MODES = ("auto", *RUN_MODES)  # --mode; auto: kiln.install(compile="auto")


def help_text() -> str:
    return format_help(
        "run", ["[options] SCRIPT.py [SCRIPT ARGS...]", "[options] -- SCRIPT.py [SCRIPT ARGS...]"],
        "Runs an unmodified PyTorch script with a kiln library installed (kiln.install): kiln's kernels run "
        "where their shape gate admits a call, PyTorch's everywhere else. Everything from SCRIPT.py on "
        "belongs to the script, which runs as __main__ as `python SCRIPT args` would run it; put `--` before "
        "a script whose name starts with a dash. A library that libkiln_rt refuses (another device, another "
        "kiln build, a damaged manifest or kernel) is reported on stderr and the script runs eagerly.",
        [(f"{flag} {value}" if value else flag, text) for flag, value, text in OPTIONS],
        [("N", "the script's own exit status"), (1, "--strict and the library was refused"),
         (2, "bad invocation: no library given, no such script")],
        "kiln run --library runs/resnet50/library --stats examples/resnet50.py --small")


def parse_args(argv: list) -> dict:
    """kiln's options come before the script; everything after the script is the script's."""
    opts = {"library": os.environ.get("KILN_LIBRARY") or None, "entries": None, "strict": False, "mode": None,
            "compile": False, "graph": False, "stats": False, "stats_json": None, "script": None, "script_args": [],
            "help": False}
    valued = {flag for flag, value, _ in OPTIONS if value}
    flags = {flag for flag, value, _ in OPTIONS if not value}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            i += 1
            break
        if not a.startswith("-") or a == "-":
            break
        name, eq, value = a.partition("=")
        if name in ("-h", "--help"):
            opts["help"] = True
            return opts
        if name in valued:
            if not eq:
                if i + 1 >= len(argv):
                    raise UsageError(f"{name} wants a value")
                value = argv[i + 1]
                i += 1
            opts[name[2:].replace("-", "_")] = value
        elif name in flags:
            opts[name[2:].replace("-", "_")] = True
        else:
            raise UsageError(f"unknown option '{name}'; see kiln run --help (options for the script go after "
                             "the script's name)")
        i += 1
    if opts["compile"] and opts["graph"]:
        raise UsageError("--compile and --graph exclude each other (Inductor's code, or PyTorch's own kernels)")
    flag = "compile" if opts["compile"] else "graph" if opts["graph"] else None
    if opts["mode"] is not None and opts["mode"] not in MODES:
        raise UsageError(f"--mode {opts['mode']}: one of {', '.join(MODES)}")
    if flag and opts["mode"] not in (None, flag):
        raise UsageError(f"--{flag} and --mode {opts['mode']} exclude each other")
    opts["mode"] = flag or opts["mode"] or "auto"
    if i >= len(argv):
        raise UsageError("no script given")
    opts["script"], opts["script_args"] = argv[i], argv[i + 1:]
    if not opts["library"]:
        raise UsageError("no library: pass --library RUN/library or set KILN_LIBRARY")
    if not os.path.isfile(opts["script"]):
        raise UsageError(f"no such script: {opts['script']}")
    if opts["entries"] and opts["entries"] != "all":
        opts["entries"] = [n for n in opts["entries"].split(",") if n]
    return opts


def run_script(script: str, script_args: list) -> int:
    """Runs script as __main__, as `python script args` would; returns its exit status."""
    import runpy
    path = os.path.abspath(script)
    saved_argv, saved_path0 = sys.argv, (sys.path[0] if sys.path else None)
    sys.argv = [script] + list(script_args)
    if sys.path:
        sys.path[0] = os.path.dirname(path)
    else:
        sys.path.insert(0, os.path.dirname(path))
    try:
        runpy.run_path(path, run_name="__main__")
        return 0
    except SystemExit as e:
        if e.code is None:
            return 0
        if isinstance(e.code, int):
            return e.code
        print(e.code, file=sys.stderr)
        return 1
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None:
            sys.path[0] = saved_path0


def main(argv: Optional[list] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        opts = parse_args(argv)
    except UsageError as e:
        see = "" if "kiln run --help" in str(e) else "; see kiln run --help"
        print(f"kiln run: {e}{see}", file=sys.stderr)
        return 2
    if opts["help"]:
        sys.stdout.write(help_text())
        return 0

    from kiln.install import KilnError, install, uninstall
    inst = None
    try:
        mode = opts["mode"]
        inst = install(opts["library"], entries=opts["entries"],
                       compile=mode if mode in ("auto", "graph") else mode == "compile")
    except KilnError as e:
        print(f"kiln run: {e}", file=sys.stderr)
        if opts["strict"]:
            return 1
        print("kiln run: running the script eagerly", file=sys.stderr)
    if inst is not None:
        more = " (--stats lists them)" if inst.skipped and not opts["stats"] else ""
        print(f"kiln run: {inst.line()}{more}", file=sys.stderr, flush=True)
        mode = inst.run_mode
        if mode.get("auto") and mode.get("reason") and mode["mode"] != "eager":
            print(f"kiln run: --mode {mode['mode']}, as {mode['reason']} (--mode eager runs it without a graph)",
                  file=sys.stderr, flush=True)
        if mode["mode"] == "compile":
            print("kiln run: --compile: each root module is compiled (torch.compile) at its first call, kiln's "
                  "kernels inside", file=sys.stderr, flush=True)
        elif mode["mode"] == "graph":
            print("kiln run: --graph: each root module is captured (dynamo) at its first call and run with kiln's "
                  "chains replaced, PyTorch's kernels for the rest", file=sys.stderr, flush=True)
    if inst is not None and opts["stats"]:
        print(inst.summary(), file=sys.stderr, flush=True)
    try:
        status = run_script(opts["script"], opts["script_args"])
    finally:
        if inst is not None:
            stats = inst.stats()
            from kiln.install_graph import graph_notes
            for note in graph_notes(inst):  # a graph that ran without kiln's chains says why, --stats or not
                print(f"kiln run: {note}", file=sys.stderr)
            if opts["stats"]:
                print(f"kiln run: {stats['hits']} kernel calls by kiln, {stats['misses']} fell back to "
                      "PyTorch", file=sys.stderr)
                for target, c in stats["targets"].items():
                    print(f"  {target:40s} hits {c['hits']:>8}  misses {c['misses']:>8}  "
                          f"grad fallbacks {c['grad_fallbacks']:>6}", file=sys.stderr)
            if opts["stats_json"]:
                record = {"library": inst.library.path, "mode": inst.run_mode, "installed": inst.installed,
                          "skipped": inst.skipped,
                          "compiled": inst._roots.compiled if inst._roots is not None else None,
                          "left_out": inst.left_out, "dispatch_cost_us": inst.dispatch_cost_us,
                          "notes": inst.notes, "stats": stats}
                with open(opts["stats_json"], "w") as f:
                    json.dump(record, f, indent=1)
            uninstall()
        elif opts["stats_json"]:
            with open(opts["stats_json"], "w") as f:
                json.dump({"library": opts["library"], "installed": [], "refused": True}, f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
