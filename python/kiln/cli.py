"""kiln.cli: the command line of kiln's Python commands (capture, run, tune) in the form of the C commands
(src/cli/options.c): a help with the same parts in the same order (usage, a one-paragraph description,
options with their bounds and defaults, exit status, one example), usage errors of one line that begin
`kiln CMD:`, and --json's rule that stdout then holds the JSON and nothing else."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import textwrap
from typing import Callable, Optional

HELP_COLUMN = 24
HELP_WIDTH = 100


class UsageError(Exception):
    """A bad invocation: main() prints `kiln CMD: <message>` and exits 2."""


def _wrap(text: str, first: int, indent: int) -> str:
    """text wrapped to HELP_WIDTH, its first line starting at column `first`, the others at `indent`."""
    lines = textwrap.wrap(" " * first + text, HELP_WIDTH, subsequent_indent=" " * indent,
                          break_long_words=False, break_on_hyphens=False)
    return "\n".join(lines)[first:] if lines else ""


def format_help(command: str, usage: list, about: str, options: list, exit_status: list, example: str) -> str:
    """The help text of `kiln <command>`: usage forms, description, (label, text) option rows, (code,
    meaning) exit statuses, one example command line."""
    out = [("usage:" if i == 0 else "      ") + f" kiln {command} {form}" for i, form in enumerate(usage)]
    out += ["", _wrap(about, 0, 0), "", "options:"]
    for label, text in options + [("-h, --help", "this text")]:
        head = f"  {label}"
        if len(head) + 2 > HELP_COLUMN:
            out += [head, " " * HELP_COLUMN + _wrap(text, HELP_COLUMN, HELP_COLUMN)]
        else:
            out.append(head.ljust(HELP_COLUMN) + _wrap(text, HELP_COLUMN, HELP_COLUMN))
    out += ["", "exit status:"]
    out += [f"  {str(code):<4}" + _wrap(meaning, 6, 6) for code, meaning in exit_status]
    out += ["", "example:", f"  {example}"]
    return "\n".join(out) + "\n"


def _integer(text: str) -> int:
    return int(text, 10)


def _number(text: str) -> float:
    v = float(text)
    if v != v or v in (float("inf"), float("-inf")):
        raise ValueError(text)
    return v


_UNSET = object()  # Parser.option's "no default given": argparse's own default for the action applies


class Parser(argparse.ArgumentParser):
    """argparse with kiln's help and errors. Options are declared with option(), which takes their
    bounds and their default in words; values are checked after parsing, with messages in the words of
    the C commands ("--top wants an integer >= 1, got '0'")."""

    def __init__(self, command: str, usage: list, about: str, exit_status: list, example: str,
                 unknown_hint: str = ""):
        super().__init__(prog=f"kiln {command}", add_help=False, allow_abbrev=False)
        self.command, self.usage_forms, self.about = command, usage, about
        self.exit_status, self.example, self.unknown_hint = exit_status, example, unknown_hint
        self._rows: list = []    # (label, text) for the help, in declaration order
        self._checks: dict = {}  # flag -> (dest, convert, wants, lo, hi, choices, unknown)
        self.add_argument("-h", "--help", action="help", help=argparse.SUPPRESS)

    def option(self, *flags, help: str, metavar: Optional[str] = None, kind: Optional[str] = None,
               lo=None, hi=None, choices: Optional[list] = None, default=_UNSET, default_text: Optional[str] = None,
               convert: Optional[Callable] = None, wants: Optional[str] = None, unknown: Optional[str] = None,
               **kwargs):
        """Declares an option. kind: None (a string or a flag, as kwargs say), "int" or "number" (bounds
        lo..hi, either may be None), or "custom" (convert(text) -> value, raising ValueError; wants says
        what it takes). choices: the allowed strings. default_text: the default in words; else the
        default value is shown when it is not None or False. unknown: a value outside choices is refused as
        "unknown <unknown> 'x' (use a or b)", the words of the C commands' --backend."""
        if kind == "int":
            convert, wants = _integer, "an integer"
        elif kind == "number":
            convert, wants = _number, "a number"
        if wants and (lo is not None or hi is not None):
            wants += (f" in [{lo}, {hi}]" if lo is not None and hi is not None else
                      f" >= {lo}" if lo is not None else f" <= {hi}")
        if choices:
            wants = "one of " + "|".join(choices)
        if metavar is not None:
            kwargs["metavar"] = metavar
        if default is not _UNSET:  # None too: a flag pair (--x / --no-x) whose default is "decided later"
            kwargs["default"] = default
        action = self.add_argument(*flags, help=argparse.SUPPRESS, **kwargs)
        if convert or choices:
            self._checks[flags[-1]] = (action.dest, convert, wants, lo, hi, choices, unknown)
        label = ", ".join(flags) + (("" if metavar.startswith("[") else " ") + metavar if metavar else "")
        if default_text is None and default is not _UNSET and default not in (None, False):
            default_text = str(default)
        notes = [n for n in (wants, f"default: {default_text}" if default_text else None) if n]
        self._rows.append((label, help + (f" ({'; '.join(notes)})" if notes else "")))
        return action

    def format_help(self) -> str:
        return format_help(self.command, self.usage_forms, self.about, self._rows, self.exit_status, self.example)

    def error(self, message: str):
        raise UsageError(f"{message}; see kiln {self.command} --help")

    def _value(self, flag: str, text: str):
        """text checked and converted as option flag declares (UsageError when it may not be)."""
        dest, convert, wants, lo, hi, choices, unknown = self._checks[flag]
        try:
            if choices and text not in choices:
                if unknown:
                    raise UsageError(f"unknown {unknown} '{text}' (use {', '.join(choices[:-1])} or {choices[-1]})")
                raise ValueError(text)
            value = convert(text) if convert else text
            if (lo is not None and value < lo) or (hi is not None and value > hi):
                raise ValueError(text)
        except ValueError:
            raise UsageError(f"{flag} wants {wants}, got '{text}'") from None
        return value

    def _check_options(self, argv: list) -> None:
        """Checks every option of argv before argparse looks at the operands, as getopt does for the C
        commands: the first unknown option or bad value is the error."""
        i = 0
        while i < len(argv):
            a = argv[i]
            if a.startswith("-") and len(a) > 1 and not a[1:].replace(".", "").isdigit():
                name, eq, value = a.partition("=")
                action = self._option_string_actions.get(name)
                if action is None:
                    raise UsageError(f"unknown option '{name}'; see kiln {self.command} --help{self.unknown_hint}")
                see = f"; see kiln {self.command} --help"
                if eq and action.nargs == 0:
                    raise UsageError(f"{name} takes no value{see}")
                if not eq and action.nargs is None:
                    i += 1
                    if i >= len(argv):
                        raise UsageError(f"{name} wants a value{see}")
                    value = argv[i]
                if (eq or action.nargs is None) and name in self._checks:
                    self._value(name, value)
            i += 1

    def parse(self, argv: list) -> argparse.Namespace:
        self._check_options(argv)
        opts, extra = self.parse_known_args(argv)
        if extra:
            raise UsageError(f"unexpected argument '{extra[0]}'; see kiln {self.command} --help")
        for flag, (dest, *_) in self._checks.items():
            value = getattr(opts, dest)
            if isinstance(value, str):  # given (a default is declared with its type)
                setattr(opts, dest, self._value(flag, value))
        return opts


@contextlib.contextmanager
def stdout_to_stderr(active: bool = True):
    """While active: everything written to stdout (Python's and the file descriptor's, so a child
    process and the user's script too) goes to stderr, so that --json leaves stdout to the one JSON
    document printed after the block."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved_fd = os.dup(1)
    saved = sys.stdout
    try:
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_fd, 1)
        os.close(saved_fd)
        sys.stdout = saved
