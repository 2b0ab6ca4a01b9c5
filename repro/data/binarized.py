"""Binarized token arrays: one flat int32 array per split and side, plus int64 offsets; memory-mapped on read.

`<prefix>.bin` holds every sequence's token ids back to back, `<prefix>.idx` the start offsets (n + 1 values).
Writers stream (bounded memory) into temporary files and rename them into place only when complete.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


class TokenArrayWriter:
    def __init__(self, prefix: Path):
        self.prefix = Path(prefix)
        self.bin_tmp = self.prefix.with_name(self.prefix.name + ".bin.tmp")
        self.idx_tmp = self.prefix.with_name(self.prefix.name + ".idx.tmp")
        self._bin = open(self.bin_tmp, "wb")
        self._offsets = [0]

    def add(self, ids) -> None:
        arr = np.asarray(ids, dtype=np.int32)
        self._bin.write(arr.tobytes())
        self._offsets.append(self._offsets[-1] + len(arr))

    def close(self) -> None:
        self._bin.close()
        np.asarray(self._offsets, dtype=np.int64).tofile(self.idx_tmp)
        os.replace(self.idx_tmp, self.prefix.with_name(self.prefix.name + ".idx"))
        os.replace(self.bin_tmp, self.prefix.with_name(self.prefix.name + ".bin"))

    def abort(self) -> None:
        self._bin.close()
        for p in (self.bin_tmp, self.idx_tmp):
            p.unlink(missing_ok=True)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *_):
        self.abort() if exc_type else self.close()


class TokenArray:
    """Read side: `arr[i]` is sequence i as an int64 tensor-ready numpy array; `sizes` their lengths."""

    def __init__(self, prefix: Path):
        prefix = Path(prefix)
        bin_path, idx_path = prefix.with_name(prefix.name + ".bin"), prefix.with_name(prefix.name + ".idx")
        if not bin_path.is_file() or not idx_path.is_file():
            raise FileNotFoundError(f"{bin_path}: binarized data missing; run `lnrepro prepare` first")
        self.offsets = np.fromfile(idx_path, dtype=np.int64)
        n_tokens = bin_path.stat().st_size // 4
        if len(self.offsets) == 0 or self.offsets[-1] != n_tokens:
            raise ValueError(f"{bin_path}: index and data disagree (corrupt or half-written); prepare it again")
        self.data = np.memmap(bin_path, dtype=np.int32, mode="r") if n_tokens else np.zeros(0, np.int32)
        self.sizes = np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, i: int) -> np.ndarray:
        return np.asarray(self.data[self.offsets[i]: self.offsets[i + 1]], dtype=np.int64)
