"""The checks the commands share on their options, before any work: folders to read and write, a scale of the
ladder, CPU threads, trusted checkpoints. Each raises a ValueError of one line naming the option and its value,
which the command line prints as its error (exit 2)."""

from __future__ import annotations

import os
from pathlib import Path


def default_root() -> Path:
    """Where prepared corpora live unless --root says: $LNREPRO_DATA, else data/."""
    return Path(os.environ.get("LNREPRO_DATA", "data"))


def check_folder(path: Path, option: str, writable: bool = False) -> None:
    """A folder option must name a folder (or nothing yet), and one a command writes into must be writable: fail
    before any work, not after it."""
    for parent in [path, *path.parents]:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{option} {path}: {parent} is a file, not a folder")
            if writable and not os.access(parent, os.W_OK):
                raise ValueError(f"{option} {path}: {parent} is not writable")
            return


def check_results(results: Path) -> None:
    """A command that reads records needs their folder: a missing one would print tables of "not run"."""
    if not results.is_dir():
        raise ValueError(f"--results {results}: no such folder of run records")


def check_jobs(jobs: int | None) -> None:
    """--jobs, where given, must run at least one job at once: fail before any work."""
    if jobs is not None and jobs < 1:
        raise ValueError(f"--jobs {jobs}: expected at least 1")


def check_scale(scale: str) -> None:
    """--scale must name a scale of the ladder: an unknown one would read no records and print empty tables."""
    from repro.config import SCALES
    if scale not in SCALES:
        raise ValueError(f"--scale {scale!r}: expected one of {', '.join(SCALES)}")


def set_threads(threads: int | None) -> None:
    """--threads, else $LNREPRO_THREADS (set by `calibrate`/`reproduce` for their jobs), else torch's default."""
    threads = threads or int(os.environ.get("LNREPRO_THREADS", "0") or 0)
    if threads < 0:
        raise ValueError(f"--threads {threads}: expected a positive number")
    if threads:
        import torch
        torch.set_num_threads(threads)


def trust_checkpoints(trust: bool) -> None:
    """--trust-checkpoints: load checkpoints that have no .sha256 beside them (repro/train/checkpoint.py)."""
    if trust:
        from repro.train.checkpoint import TRUST
        os.environ[TRUST] = "1"
