"""Checkpoints written atomically (temporary file, then rename) with a SHA-256 beside each, the last N kept, and
parameter averaging. A checkpoint whose bytes no longer match its checksum is refused on resume and evaluate."""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from repro.checksum import sha256_file

PATTERN = re.compile(r"checkpoint_(\d+)\.pt$")


class CheckpointError(RuntimeError):
    pass


def checksum_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def save(state: dict, run_dir: Path, step: int, keep_last: int) -> Path:
    path = run_dir / f"checkpoint_{step}.pt"
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    digest_tmp = checksum_path(tmp)
    digest_tmp.write_text(sha256_file(tmp) + "\n")
    os.replace(digest_tmp, checksum_path(path))  # the checksum lands first: a .pt never exists without it
    os.replace(tmp, path)
    for old in list_checkpoints(run_dir)[:-keep_last]:
        old.unlink()
        checksum_path(old).unlink(missing_ok=True)
    return path


def list_checkpoints(run_dir: Path) -> list[Path]:
    found = [(int(m.group(1)), p) for p in Path(run_dir).glob("checkpoint_*.pt") if (m := PATTERN.search(p.name))]
    return [p for _, p in sorted(found)]


def load(path: Path) -> dict:
    digest = checksum_path(Path(path))
    if digest.is_file() and digest.read_text().strip() != sha256_file(path):
        raise CheckpointError(f"{path}: damaged (its bytes no longer match {digest.name}); delete it to resume "
                              f"from the one before")
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # torch raises several kinds for a truncated or foreign file
        raise CheckpointError(f"{path}: cannot be read as a checkpoint ({type(e).__name__}); "
                              f"delete it to resume from the one before") from None


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
