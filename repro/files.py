"""Writing a file so that a reader sees the old one or the new one, never half of either (records, pages,
prepared corpora and run state all go through it)."""

from __future__ import annotations

import os
from pathlib import Path


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary file beside `path`, then rename: a reader sees the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:  # a full disk, say: no temporary left behind, the old file (if any) untouched
        tmp.unlink(missing_ok=True)
        raise OSError(e.errno, f"{path}: {e.strerror}; nothing half-written is left") from None
