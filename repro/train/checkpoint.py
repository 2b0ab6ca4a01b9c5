"""Checkpoints written atomically (temporary file, then rename) with a SHA-256 beside each, the last N kept, and
parameter averaging. A checkpoint whose bytes no longer match its checksum is refused on resume and evaluate, and so
is one without its checksum unless the user trusts it ($LNREPRO_TRUST_CHECKPOINTS, set by --trust-checkpoints).

A checkpoint is read as data only (`torch.load(weights_only=True)`): tensors, numbers, strings and containers, plus
the one class older checkpoints hold (torch's version string). The checksum guards against damage, not against
whoever wrote both files, so a checkpoint that names any other global is refused before anything of it runs."""

from __future__ import annotations

import errno
import os
import pickle
import re
from pathlib import Path

import torch
from torch.torch_version import TorchVersion

from repro.checksum import sha256_file

PATTERN = re.compile(r"checkpoint_(\d+)\.pt$")
# A checkpoint written on wall time, between the recipe's save_interval ones, only to lose little when a run is
# stopped: resumed from, never averaged, and dropped once a newer checkpoint of either kind exists.
RESUME_PATTERN = re.compile(r"resume_(\d+)\.pt$")
RESUME_MINUTES = float(os.environ.get("LNREPRO_CHECKPOINT_MINUTES", "10"))


class CheckpointError(RuntimeError):
    pass


def checksum_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def save(state: dict, run_dir: Path, step: int, keep_last: int | None, kind: str = "checkpoint") -> Path:
    """Write checkpoint_<step>.pt and its checksum, then keep the last `keep_last` (None: prune later, as a group
    does once all its members have written theirs); a failed write (a full disk) leaves no temporary file behind
    and the previous checkpoint the newest, and says so in one line."""
    path = run_dir / f"{kind}_{step}.pt"
    tmp = path.with_name(path.name + ".tmp")
    digest_tmp = checksum_path(tmp)
    try:
        torch.save(state, tmp)
        digest_tmp.write_text(sha256_file(tmp) + "\n")
        os.replace(digest_tmp, checksum_path(path))  # the checksum lands first: a .pt never exists without it
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:  # torch reports a full disk as a RuntimeError from its writer
        for t in (tmp, digest_tmp, checksum_path(path)):
            if t != checksum_path(path) or not path.is_file():
                t.unlink(missing_ok=True)
        full = getattr(e, "errno", None) == errno.ENOSPC or "No space left" in str(e) or "file write failed" in str(e)
        newest = list_checkpoints(run_dir)
        raise CheckpointError(f"{path}: {'no space left on the disk of ' + str(run_dir) if full else e}; nothing "
                              f"half-written is left, and {newest[-1].name if newest else 'no checkpoint'} stays the "
                              f"newest") from None
    if keep_last is not None:
        prune(run_dir, keep_last)
    return path


def prune(run_dir: Path, keep_last: int) -> None:
    """Delete all but the newest `keep_last` checkpoints (and their checksums), and every wall-time one older than
    the newest checkpoint of either kind (a group prunes once all its members have written theirs)."""
    for old in list_checkpoints(run_dir)[:-keep_last]:
        old.unlink()
        checksum_path(old).unlink(missing_ok=True)
    regular = [step_of(p) for p in list_checkpoints(run_dir)]
    wall = sorted(list_resume(run_dir), key=step_of)
    for old in wall:
        if old != wall[-1] or (regular and step_of(old) <= max(regular)):
            old.unlink(missing_ok=True)
            checksum_path(old).unlink(missing_ok=True)


def list_resume(run_dir: Path) -> list[Path]:
    return [p for p in Path(run_dir).glob("resume_*.pt") if RESUME_PATTERN.search(p.name)]


def step_of(path: Path) -> int:
    return int((PATTERN.search(path.name) or RESUME_PATTERN.search(path.name)).group(1))


def resumable(run_dir: Path) -> list[Path]:
    """Every checkpoint a run may resume from, oldest first: the save_interval ones and a wall-time one."""
    return sorted([*list_checkpoints(run_dir), *list_resume(run_dir)], key=step_of)


def list_checkpoints(run_dir: Path) -> list[Path]:
    found = [(int(m.group(1)), p) for p in Path(run_dir).glob("checkpoint_*.pt") if (m := PATTERN.search(p.name))]
    return [p for _, p in sorted(found)]


TRUST = "LNREPRO_TRUST_CHECKPOINTS"
# Checkpoints written before hardware() stored torch's version as a plain string hold it as this str subclass.
SAFE_GLOBALS = [TorchVersion]


def foreign_globals(path: Path) -> list[str]:
    """The globals a checkpoint names beyond those it may hold (read from its pickle's opcodes: nothing runs)."""
    try:
        names = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # a foreign file may not even be a zip: it is refused all the same
        return []
    allowed = {f"{g.__module__}.{g.__qualname__}" for g in SAFE_GLOBALS}
    return [n for n in names if n not in allowed]


def load(path: Path) -> dict:
    digest = checksum_path(Path(path))
    if not digest.is_file() and not os.environ.get(TRUST):
        raise CheckpointError(f"{path}: has no {digest.name} to check its bytes against; --trust-checkpoints loads "
                              f"it as it is")
    if digest.is_file() and digest.read_text().strip() != sha256_file(path):
        raise CheckpointError(f"{path}: damaged (its bytes no longer match {digest.name}); delete it to resume "
                              f"from the one before")
    try:
        with torch.serialization.safe_globals(SAFE_GLOBALS):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        foreign = foreign_globals(path)
        if foreign or "global" in str(e).lower():
            raise CheckpointError(f"{path}: refused: it names {', '.join(foreign) or 'a global'}, which no lnrepro "
                                  f"checkpoint holds (a checkpoint is read as data only)") from None
        raise CheckpointError(f"{path}: cannot be read as a checkpoint (UnpicklingError); delete it to resume from "
                              f"the one before") from None
    except Exception as e:  # torch raises several kinds for a truncated or foreign file
        raise CheckpointError(f"{path}: cannot be read as a checkpoint ({type(e).__name__}); "
                              f"delete it to resume from the one before") from None


def newest_intact(paths: list[Path]) -> tuple[Path | None, dict | None, list[str]]:
    """The newest checkpoint that loads (path, state), and why each newer one was skipped."""
    skipped = []
    for path in reversed(paths):
        try:
            return path, load(path), skipped
        except CheckpointError as e:
            skipped.append(str(e))
    return None, None, skipped


def average(paths: list[Path]) -> dict:
    """Mean of the model parameters of several checkpoints (fairseq's average_checkpoints)."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    total = None
    for p in paths:
        model = load(p)["model"]
        if total is None:
            total = {k: v.clone().double() if v.is_floating_point() else v.clone() for k, v in model.items()}
        else:
            for k, v in model.items():
                if v.is_floating_point():
                    total[k] += v.double()
    return {k: (v / len(paths)).float() if v.is_floating_point() else v for k, v in total.items()}
