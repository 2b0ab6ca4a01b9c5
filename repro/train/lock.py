"""A run directory's lock: one training process at a time, and a way to ask, without torch, whether one holds it."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path


class RunDirError(ValueError):
    """A run directory that cannot be used as asked; the message is one line saying what exists and what to do."""


@contextlib.contextmanager
def run_lock(run_dir: Path):
    """An exclusive lock on the run directory for as long as a training uses it (released if the process dies). A
    directory made for a training that then wrote nothing (a corpus not prepared, say) is removed again."""
    made = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / ".lock", "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "?"
            raise RunDirError(f"{run_dir} is in use by another lnrepro process (pid {holder}); wait for it to end "
                              f"or train into another --run-dir") from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        try:
            yield
        finally:
            if made and [p.name for p in run_dir.iterdir()] == [".lock"]:
                (run_dir / ".lock").unlink()
                run_dir.rmdir()
            fcntl.flock(f, fcntl.LOCK_UN)


def lock_holder(run_dir: Path) -> str | None:
    """The pid of the process training in `run_dir` now, or None where none is (a dead holder's lock is free)."""
    path = run_dir / ".lock"
    if not path.is_file():
        return None
    with open(path) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return f.read().strip() or "?"
        fcntl.flock(f, fcntl.LOCK_UN)
    return None
