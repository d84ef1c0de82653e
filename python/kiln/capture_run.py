"""The run directory as `kiln capture` writes it: the run's lock, the ledger of problem names and contents,
and the swap that replaces RUN/problems only once a capture has succeeded.

A run belongs to one kiln process at a time: capture takes RUN/kiln.lock (flock, the lock of
src/store/store.c, with the same note "pid N\\nstarted TIME\\n") for its whole run, so a capture into a run
that `kiln optimize` is working on is refused instead of replacing the problems under its agents.

A problem is its content (docs/capture.md): results found for one content must never be taken for
another that got the same name. Capture keeps a ledger, "names" in RUN/capture.json, of every name it
gave in this run with its content hash, and names a new problem so that a name never changes meaning: the
name a content had before, else the plain name when it is free or meant this content, else the plain name
with the first digits of its content hash.

New problems are written into RUN/problems.new/ and swapped in at the end; a capture that fails leaves
the previous one as it was.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import shutil
import time
from typing import Optional

from kiln.problem import DEFINITION_FILE, ProblemError, content_hash_of_dir

LOCK_FILE = "kiln.lock"
NAME_MAX = 96


class RunLocked(Exception):
    """Another kiln process holds the run; the message says which."""


class RunDir:
    def __init__(self, path: str):
        self.path = path
        self.problems = os.path.join(path, "problems")
        self.staging = os.path.join(path, "problems.new")
        self.spool_dir = os.path.join(path, f".capture-spool-{os.getpid()}")
        self.ledger: dict = {}     # name -> content hash, every name capture gave in this run
        self.by_hash: dict = {}    # content hash -> the name it had
        self.given: dict = {}      # name -> content hash, this capture's
        self.lock_fd: Optional[int] = None

    def open(self) -> None:
        """Creates the run directory, takes its lock (RunLocked when another process holds it), reads the
        ledger and clears what a killed capture left. Raises OSError."""
        os.makedirs(self.path, exist_ok=True)
        self._lock()
        self._read_ledger()
        for leftover in [self.staging, os.path.join(self.path, "problems.old")] + \
                glob.glob(os.path.join(self.path, ".capture-spool-*")):
            shutil.rmtree(leftover, ignore_errors=True)
        os.makedirs(self.staging)

    def _lock(self) -> None:
        path = os.path.join(self.path, LOCK_FILE)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            note = os.pread(fd, 256, 0).decode(errors="replace")
            os.close(fd)
            pid = next((line[4:].strip() for line in note.splitlines() if line.startswith("pid ")), None)
            started = next((line[8:].strip() for line in note.splitlines() if line.startswith("started ")),
                           "an unknown time")
            who = f"pid {pid}, started {started}" if pid else "pid unknown"
            raise RunLocked(f"{self.path} is in use by another kiln process ({who}): kiln optimize or tune "
                            f"is working on it; capture when it has finished, or into another --out")
        os.ftruncate(fd, 0)
        note = f"pid {os.getpid()}\nstarted {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n"
        os.pwrite(fd, note.encode(), 0)
        self.lock_fd = fd

    def _read_ledger(self) -> None:
        try:
            with open(os.path.join(self.path, "capture.json")) as f:
                names = json.load(f).get("names")
            if isinstance(names, dict):
                self.ledger.update({k: v for k, v in names.items() if isinstance(v, str)})
        except (OSError, ValueError, AttributeError):
            pass
        for d in sorted(glob.glob(os.path.join(self.problems, "*", DEFINITION_FILE))):
            name = os.path.basename(os.path.dirname(d))
            try:
                with open(d) as f:
                    h = (json.load(f).get("kiln") or {}).get("content_hash")
                if not isinstance(h, str):
                    h = content_hash_of_dir(os.path.dirname(d))
            except (OSError, ValueError, AttributeError, ProblemError):
                continue
            self.ledger[name] = h
        for name, h in self.ledger.items():
            self.by_hash.setdefault(h, name)

    def name_for(self, base: str, content_hash: str) -> str:
        """The name of a new problem whose plain name is base (see the module docstring)."""
        old = self.by_hash.get(content_hash)
        if old is not None and old not in self.given:
            name = old
        else:
            name = base
            for digits in (8, 16, 32):
                if self.ledger.get(name, content_hash) == content_hash and name not in self.given:
                    break
                name = f"{base[:NAME_MAX - digits - 1]}_{content_hash[:digits]}"
        self.given[name] = content_hash
        return name

    def staging_dir(self, name: str) -> str:
        return os.path.join(self.staging, name)

    def commit(self) -> dict:
        """Swaps the new problems in; returns the ledger to write into capture.json."""
        old = os.path.join(self.path, "problems.old")
        if os.path.isdir(self.problems):
            os.replace(self.problems, old)
        os.replace(self.staging, self.problems)
        shutil.rmtree(old, ignore_errors=True)
        ledger = dict(self.ledger)
        ledger.update(self.given)
        return ledger

    def close(self) -> None:
        """Removes the spool and an uncommitted staging folder; releases the lock."""
        shutil.rmtree(self.spool_dir, ignore_errors=True)
        shutil.rmtree(self.staging, ignore_errors=True)
        if self.lock_fd is not None:
            try:
                os.ftruncate(self.lock_fd, 0)
            except OSError:
                pass
            os.close(self.lock_fd)
            self.lock_fd = None
