"""Writing a file so that a reader sees the old one or the new one, never half of either (records, pages,
prepared corpora and run state all go through it), and reading JSON and JSON-lines files so that a garbled one is a
one-line error naming the file and the line."""

from __future__ import annotations

import json
import os
from pathlib import Path


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary file beside `path`, then rename: a reader sees the old file or the new one."""
    atomic_write(Path(path), lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write(path: Path, write) -> None:
    """`write(tmp)` fills a temporary file beside `path`, which then replaces it (a figure's PNG goes so too)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as e:  # a full disk, say: no temporary left behind, the old file (if any) untouched
        tmp.unlink(missing_ok=True)
        raise OSError(e.errno, f"{path}: {e.strerror}; nothing half-written is left") from None


def read_json(path: Path):
    """A JSON file's content; a garbled one is a one-line ValueError naming the file and the line."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        where = f" (line {e.lineno})" if hasattr(e, "lineno") else ""
        raise ValueError(f"{path}: not valid JSON{where}; restore it with git or remove it") from None


def read_jsonl(path: Path, tolerant: bool = False) -> list:
    """A JSON-lines log's rows. Strict: a garbled line is a one-line ValueError naming the file and the line.
    `tolerant` (a log a running trainer is still writing): such a line is skipped, and a missing file has none."""
    if tolerant and not Path(path).is_file():
        return []
    return jsonl_rows(Path(path).read_bytes().split(b"\n"), path, tolerant)


def jsonl_rows(lines, path: Path | str, tolerant: bool = False) -> list:
    """The rows of JSON lines (bytes or text) read from `path`, as read_jsonl reads them."""
    rows = []
    for i, line in enumerate(lines, 1):
        if line.strip():
            try:
                rows.append(json.loads(line.decode("utf-8") if isinstance(line, bytes) else line))
            except ValueError:  # UnicodeDecodeError too
                if tolerant:
                    continue
                raise ValueError(f"{path}: line {i} is not JSON in UTF-8; restore the file or remove that line") \
                    from None
    return rows
