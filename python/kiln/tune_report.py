"""kiln.tune_report: `kiln tune`'s report, RUN/report.md and RUN/report.json, from the dict tune fills (tune.py):
the time spent, the model's forward four ways (five with kiln's graph mode), every hot op with what became of
it, every library entry with why it was installed or not. No cell shows a speedup the spreads do not support
(kiln.install_cost's speedup_judge: "n.s." when the interval contains 1, "noisy" when it does and eager's own
spread is over 5 %, a figure with "!" when either spread is over 5 % and the interval still excludes 1).

The files are written atomically (a temporary file, then rename), and a tune that failed never replaces the
report of one that succeeded: its report goes to RUN/report.failed.{md,json} instead, and the last good one
stays where it was."""

from __future__ import annotations

import json
import math
import os
from typing import Optional

from kiln.install_cost import SPREAD_LIMIT_PCT, speedup_judge, speedup_text

OUT_OF_TIME_PREFIX = "out of time"
WHY_MAX = 240  # characters of a reason in report.md's hot-op table


def _fmt(v, spec: str = ".3f", none: str = "-") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return none
    return format(v, spec)


def _spread(v) -> str:
    """A spread cell: "2.1%", "7.0%!" over the limit, "-" unknown."""
    if not isinstance(v, (int, float)):
        return "-"
    return f"{v:.1f}%" + ("!" if v > SPREAD_LIMIT_PCT else "")


def _compile_notes(notes) -> list:
    """kiln + torch.compile's notes of entries its graphs did not get: those left to Inductor by layout as one
    line naming them (DenseNet has dozens), the others as they are."""
    from kiln.install_inductor import LEFT_TO_INDUCTOR
    left = [n.split(":", 1)[0] for n in notes if LEFT_TO_INDUCTOR in n]
    lines = [f"kiln + torch.compile: {n}." for n in notes if LEFT_TO_INDUCTOR not in n]
    if left:
        lines.insert(0, f"kiln + torch.compile: {len(left)} entr{'y' if len(left) == 1 else 'ies'} "
                        f"{LEFT_TO_INDUCTOR} ({', '.join(f'`{n}`' for n in left)}).")
    return lines


def _speedup(eager, eager_spread, other, other_spread) -> str:
    verdict, value, _ = speedup_judge(eager, eager_spread, other, other_spread)
    return speedup_text(verdict, value)


def _compile_cell(m: dict, ms_key: str, error_key: str, off: str) -> str:
    if ms_key in m:
        return _fmt(m.get(ms_key))
    error = str(m.get(error_key) or "")
    if error.startswith("interrupted"):
        return "interrupted"
    if error.startswith(OUT_OF_TIME_PREFIX):
        return "out of time"
    return "failed" if error else off


def _time_section(report: dict) -> list:
    budget = report.get("time_budget_s")
    if budget is None:
        return []
    steps = report.get("steps") or {}
    spent = ", ".join(f"{name} {s['seconds']:.0f} s" for name, s in steps.items()
                      if isinstance(s, dict) and isinstance(s.get("seconds"), (int, float)))
    lines = ["## Time", "", f"Budget {budget:g} s (--time); spent {_fmt(report.get('elapsed_s'), '.0f')} s"
             + (f" ({spent})" if spent else "") + "."]
    search = report.get("search") or {}
    if search.get("planned_s") is not None:
        lines.append(f"The search was given {search['planned_s']:.0f} s ({search.get('reserve_s', 0):.0f} s kept for "
                     f"the install check and the report) and ended: {search.get('stopped') or 'done'}."
                     + (f" `--time {search['time_hint_s']}` would have left it about "
                        f"{search.get('time_hint_search_s', 0):.0f} s." if search.get("time_hint_s") else ""))
    elif search.get("stopped"):
        lines.append(f"The search: {search['stopped']}.")
    if report.get("out_of_time"):
        lines.append(f"{report['out_of_time'][0].upper()}{report['out_of_time'][1:]}: what was measured in time is "
                     "below.")
    return lines + [""]


# The ways to run the model, simplest first: (report key, name, `kiln run --mode` that runs it, how to run it;
# {lib} and {script} filled in). The mode goes to install.json ("run_mode"), which a plain `kiln run` follows.
_WAYS = (("eager_ms", "eager", "eager", "run the script as it is"),
         ("compile_ms", "torch.compile", "compile", "compile the model with torch.compile, without kiln"),
         ("kiln_ms", "kiln", "eager", "`kiln run --library {lib} {script}`"),
         ("kiln_graph_ms", "kiln graph mode", "graph", "`kiln run --graph --library {lib} {script}`"),
         ("kiln_compile_ms", "kiln + torch.compile", "compile", "`kiln run --compile --library {lib} {script}`"))


def recommend(report: dict) -> Optional[dict]:
    """The fastest way to run the model that the spreads support: walking the ways simplest first, a way
    replaces the one kept so far only when it is faster by a margin the two spreads support (speedup_judge),
    so noise never recommends the more complicated way. None when eager was not timed."""
    m = report.get("model") or {}
    if not isinstance(m.get("eager_ms"), (int, float)):
        return None
    installed = bool(m.get("kiln_entries_installed"))
    best = None
    for key, name, mode, how in _WAYS:
        ms = m.get(key)
        if not isinstance(ms, (int, float)) or (key.startswith("kiln") and not installed):
            continue
        spread = m.get(key.replace("_ms", "_spread_pct"))
        if best is not None:
            verdict, value, _ = speedup_judge(best["ms"], best["spread_pct"], ms, spread)
            if verdict not in ("supported", "noisy") or value <= 1:  # a supported difference can be a slowdown
                continue
        best = {"way": name, "mode": mode, "ms": ms, "spread_pct": spread, "how": how}
    lib = (report.get("library") or {}).get("path") or os.path.join(report.get("run_dir", "RUN"), "library")
    best["how"] = best["how"].format(lib=lib, script=" ".join([report.get("script", "SCRIPT"),
                                                                *report.get("script_args", [])]))
    best["speedup"] = m["eager_ms"] / best["ms"] if best["ms"] > 0 else None
    return best


def _model_section(report: dict) -> list:
    m = report.get("model")
    lines = ["## Model forward", ""]
    if not m:
        note = report.get("model_note")
        if not note and report.get("out_of_time"):
            note = f"not timed: {report['out_of_time']}"
        return lines + [note or "not timed (an earlier step failed)", ""]
    lines.append("| model | grad mode | eager ms | kiln ms | torch.compile ms | kiln + torch.compile ms "
                 "| kiln speedup | compile speedup | kiln + compile speedup | max diff kiln | max diff compile "
                 "| max diff kiln + compile |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    compile_on = "compile_ms" in m or bool(m.get("compile_error"))
    comp = _compile_cell(m, "compile_ms", "compile_error", "off")
    kcomp = _compile_cell(m, "kiln_compile_ms", "kiln_compile_error", "-" if compile_on else "off")
    if kcomp == "-" and "compile_ms" in m and str(m.get("kiln_compile_note", "")).startswith("nothing installed"):
        kcomp = f"= {comp}"  # kiln + torch.compile with nothing of kiln's is torch.compile itself
    eager, es = m.get("eager_ms"), m.get("eager_spread_pct")
    lines.append(f"| {m['root']} | {m['grad_mode']} | {_fmt(eager)} | {_fmt(m.get('kiln_ms'))} | {comp} | {kcomp} | "
                 f"{_speedup(eager, es, m.get('kiln_ms'), m.get('kiln_spread_pct'))} | "
                 f"{_speedup(eager, es, m.get('compile_ms'), m.get('compile_spread_pct'))} | "
                 f"{_speedup(eager, es, m.get('kiln_compile_ms'), m.get('kiln_compile_spread_pct'))} | "
                 f"{_fmt(m.get('kiln_max_abs_diff'), '.3g')} | {_fmt(m.get('compile_max_abs_diff'), '.3g')} | "
                 f"{_fmt(m.get('kiln_compile_max_abs_diff'), '.3g')} |")
    lines.append("")
    spreads = ", ".join(f"{label} {_spread(m.get(key))}" for label, key in
                        (("eager", "eager_spread_pct"), ("kiln", "kiln_spread_pct"),
                         ("torch.compile", "compile_spread_pct"), ("kiln + torch.compile", "kiln_compile_spread_pct"))
                        if m.get(key) is not None)
    calls = (f" kiln ran {_fmt(m.get('kiln_hits_per_forward'), 'd')} kernel calls per forward and fell back "
             f"{_fmt(m.get('kiln_misses_per_forward'), 'd')} times."
             if m.get("kiln_hits_per_forward") is not None else "")  # none when every entry was dropped
    lines.append(f"Medians of {m['rounds']} alternating rounds of {m.get('iterations')} forwards each"
                 + (f" (spread over the rounds: {spreads})" if spreads else "") + "." + calls +
                 f" A speedup is n.s. where the spreads allow none (noisy where eager's own spread is over "
                 f"{SPREAD_LIMIT_PCT:.0f}% too), and marked ! where either spread is over it.")
    for d in report.get("model_dropped") or []:
        lines.append(f"Dropped `{d['entry']}`: with it the forward took {d['kiln_ms']:.3f} ms against "
                     f"{d['eager_ms']:.3f} ms eager.")
    if m.get("kiln_note"):
        lines.append(f"{m['kiln_note'][0].upper()}{m['kiln_note'][1:]}.")
    elif "kiln_ms" in m and not m.get("kiln_entries_installed"):
        lines.append("No entry won end to end, so nothing was installed: the kiln column is eager again, and "
                     "its difference from eager is the noise of this machine.")
    elif "kiln_ms" not in m:
        lines.append("kiln: nothing to install (no library), so the kiln columns are empty.")
    if m.get("compile_error"):
        lines.append(f"torch.compile: {m['compile_error']}" if m["compile_error"].startswith(OUT_OF_TIME_PREFIX)
                     else f"torch.compile failed: {m['compile_error']}")
    if "kiln_compile_ms" in m:
        vs = m.get("kiln_compile_vs_compile")
        lines.append(f"kiln + torch.compile: torch.compile of the model with kiln installed (kiln's entries "
                     f"become kiln:: custom ops in the compiled graph: module entries where the module is "
                     f"called, aten entries where Inductor's decomposition of the op matches); kiln ran "
                     f"{_fmt(m.get('kiln_compile_hits_per_forward'), 'd')} kernel calls per compiled forward"
                     + (f", {vs:.2f}x against torch.compile alone." if vs else "."))
    if m.get("kiln_compile_entries"):
        lines.append(f"kiln + torch.compile timed with: {', '.join(f'`{n}`' for n in m['kiln_compile_entries'])}.")
    alt = report.get("model_kiln_compile_alternative") or {}
    if alt.get("kiln_compile_ms") is not None:
        lines.append("Also timed inside torch.compile, with "
                     f"{', '.join(f'`{n}`' for n in alt.get('kiln_compile_entries') or [])}: "
                     f"{alt['kiln_compile_ms']:.3f} ms.")
    if "compile_entries" in report:
        lines.append("`kiln run --compile` installs " + (
            ", ".join(f"`{n}`" for n in report["compile_entries"]) + " (faster than torch.compile alone)"
            if report["compile_entries"] else "nothing: kiln + torch.compile was not faster than torch.compile "
            "alone beyond the spreads, so it is torch.compile's own") + ".")
    if m.get("kiln_compile_note"):
        lines.append(f"kiln + torch.compile: {m['kiln_compile_note']}.")
    lines += _compile_notes(m.get("kiln_compile_notes") or ())
    if m.get("kiln_compile_error") and m.get("kiln_compile_error") != m.get("compile_error"):
        lines.append(f"kiln + torch.compile failed: {m['kiln_compile_error']}")
    if "kiln_graph_ms" in m:
        lines.append(f"kiln graph mode (`kiln run --graph`: dynamo's graphs of the model run by PyTorch's own "
                     f"kernels, kiln's chains replaced in them, no Inductor): {m['kiln_graph_ms']:.3f} ms "
                     f"(speedup over eager {_speedup(eager, es, m['kiln_graph_ms'], m.get('kiln_graph_spread_pct'))}, "
                     f"spread {_spread(m.get('kiln_graph_spread_pct'))}); kiln ran "
                     f"{_fmt(m.get('kiln_graph_hits_per_forward'), 'd')} kernel calls per forward; max diff "
                     f"{_fmt(m.get('kiln_graph_max_abs_diff'), '.3g')}."
                     + "".join(f" Note: {n}" for n in m.get("kiln_graph_notes", ())))
    elif m.get("kiln_graph_error"):
        lines.append(f"kiln graph mode: {m['kiln_graph_error']}")
    if m.get("eager_repeatable") is False:
        lines.append("Note: two eager forwards differ; the model is not deterministic, so the differences "
                     "above include that.")
    rec = recommend(report)
    if rec is not None:
        if rec["way"] == "eager":
            lines.append("**Fastest here: eager** — no other way was faster beyond the timing spreads.")
        else:
            lines.append(f"**Fastest here: {rec['way']}** ({rec['speedup']:.2f}x eager, faster than each simpler "
                         f"way beyond the timing spreads): {rec['how']}."
                         + (f" A plain `kiln run --library` follows it (--mode {rec['mode']}, kept in install.json)."
                            if report.get("install_json") else ""))
    return lines + [""]


def _hot_ops_section(report: dict) -> list:
    rows = report.get("hot_ops") or []
    lines = ["## Hot ops", ""]
    if not rows:
        return lines + ["none known (no RUN/model.json)", ""]
    lines.append("| op | share | problem | eager us | eager spread | best us | spread | speedup | status | why |")
    lines.append("|---|---:|---|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        share = f"{100 * r['share']:.1f}%" if isinstance(r.get("share"), (int, float)) else "-"
        sp = _speedup(r.get("eager_us"), r.get("eager_spread_pct"), r.get("best_us"), r.get("spread_pct"))
        why = str(r.get("why") or "").replace("|", "/")
        if len(why) > WHY_MAX:  # report.json has it whole
            why = why[:WHY_MAX - 1] + "…"
        lines.append(f"| {r.get('op')} | {share} | {r.get('problem') or '-'} | {_fmt(r.get('eager_us'), '.2f')} | "
                     f"{_spread(r.get('eager_spread_pct'))} | {_fmt(r.get('best_us'), '.2f')} | "
                     f"{_spread(r.get('spread_pct'))} | {sp} | {r.get('status')} | {why} |")
    lines.append("")
    lines.append("Times from the gate (isolated, L2 flushed); eager is the baseline the winner is compared with, and "
                 "its spread is `-` where it was timed once (at capture).")
    return lines + [""]


def _entries_section(report: dict) -> list:
    rows = report.get("entries") or []
    lines = ["## Entries", ""]
    if not rows:
        n = (report.get("library") or {}).get("n_entries")
        if n and report.get("out_of_time"):  # a library the install check did not get to judge is not empty
            return lines + [f"not judged: {report['out_of_time']} before the library's {n} entries were decided "
                            "(none installed)", ""]
        return lines + ["none (no library, or an empty one)", ""]
    lines.append("| entry | replaces | share | kernel speedup | per call eager us | per call kiln us | "
                 "hit overhead us | miss overhead us | installed | hits per forward | why |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|")
    for r in rows:
        share = f"{100 * r['share']:.1f}%" if isinstance(r.get("share"), (int, float)) else "-"
        kernel = _speedup(r.get("kernel_eager_us"), r.get("kernel_eager_spread_pct"), r.get("kernel_time_us"),
                          r.get("kernel_spread_pct"))
        if kernel == "-" and isinstance(r.get("kernel_speedup"), (int, float)):
            kernel = f"{r['kernel_speedup']:.2f}x"
        lines.append(f"| {r['name']} | {r['target']} | {share} | {kernel} | "
                     f"{_fmt(r.get('op_eager_us'), '.1f')} | {_fmt(r.get('op_kiln_us'), '.1f')} | "
                     f"{_fmt(r.get('hit_overhead_us'), '.1f')} | {_fmt(r.get('miss_overhead_us'), '.1f')} | "
                     f"{'yes' if r['installed'] else 'no'} | {_fmt(r.get('hits_per_forward'), 'd')} | "
                     f"{str(r['reason']).replace('|', '/')} |")
    lines.append("")
    mode = (report.get("library") or {}).get("dispatch") or "python"
    how = {"python": "Python", "cpp": "C++", "auto": "C++ where its extension builds, else Python"}.get(mode, mode)
    took = sorted({str(r["dispatch"]) for r in rows if r.get("dispatch")})
    if took:
        how += f"; the entries timed took {' and '.join('C++' if t == 'cpp' else 'Python' for t in took)}"
    lines.append("Kernel speedup: eager over kiln kernel time in the gate (isolated, L2 flushed). Per call: "
                 "wall time of the op through PyTorch's dispatcher in a loop, with kiln's gate (aten and module "
                 f"entries dispatched by {how}). "
                 "Hit overhead: per call with kiln minus the bare launch; miss overhead: a call that misses "
                 "the gate minus the same call eagerly.")
    return lines + [""]


def render_markdown(report: dict) -> str:
    lines = [f"# kiln tune: {os.path.basename(report['script'])}", ""]
    lines.append(f"`{' '.join([report['script'], *report['script_args']])}` on {report.get('backend')} "
                 f"({report.get('device_name') or '?'}), torch {report.get('torch', '?')}, run `{report['run_dir']}`.")
    lines.append("")
    lib = report.get("library") or {}
    if lib.get("refused"):
        lines += [f"**Library refused**: {lib['refused']}", ""]
    lines += _time_section(report)
    lines += _model_section(report)
    if "hot_ops" in report:
        lines += _hot_ops_section(report)
    lines += _entries_section(report)
    if report.get("install_json"):
        lines += [f"Decisions: `{report['install_json']}` (read by `kiln run` and `kiln.install`).", ""]
    if report.get("error"):
        lines += [f"**Stopped**: {report['error']}", ""]
    return "\n".join(lines)


def _write_atomically(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _last_good(run_dir: str) -> Optional[dict]:
    """RUN/report.json when it is the report of a tune that succeeded."""
    try:
        with open(os.path.join(run_dir, "report.json")) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return None
    return old if isinstance(old, dict) and old.get("ok") is True else None


def write_report(report: dict, good: bool = True) -> str:
    """Writes RUN/report.{json,md} (atomically), or RUN/report.failed.{json,md} when this tune failed and a
    good report is there already; prints the markdown. Returns the markdown's path."""
    from kiln.tune import _log
    run_dir = report["run_dir"]
    os.makedirs(run_dir, exist_ok=True)
    report["ok"] = bool(good)
    stem = "report"
    if not good and _last_good(run_dir) is not None:
        stem = "report.failed"
        report["last_good_report"] = os.path.join(run_dir, "report.md")
    report["recommended"] = recommend(report)
    text = render_markdown(report)
    _write_atomically(os.path.join(run_dir, f"{stem}.json"), json.dumps(report, indent=1, default=str) + "\n")
    md = os.path.join(run_dir, f"{stem}.md")
    _write_atomically(md, text + "\n")
    _log("kiln tune [4/4] report: " + md)
    if stem != "report":
        _log(f"kiln tune: this tune failed; the last good report stays in {report['last_good_report']}")
    _log("")
    _log(text)
    return md
