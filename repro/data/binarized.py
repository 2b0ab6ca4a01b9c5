"""Binarized sequences: one flat array per split and side, plus int64 offsets; memory-mapped on read.

`<prefix>.bin` holds every sequence back to back (token ids as int32, or rows of float32 speech features),
`<prefix>.idx` the start offsets in rows (n + 1 values).
Writers stream (bounded memory) into temporary files and rename them into place only when complete.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from repro.data.corpora import prepare_command


class TokenArrayWriter:
    def __init__(self, prefix: Path, dtype=np.int32):
        self.prefix, self.dtype = Path(prefix), dtype
        self.bin_tmp = self.prefix.with_name(self.prefix.name + ".bin.tmp")
        self.idx_tmp = self.prefix.with_name(self.prefix.name + ".idx.tmp")
        self._bin = open(self.bin_tmp, "wb")
        self._offsets = [0]

    def add(self, ids) -> None:
        arr = np.ascontiguousarray(ids, dtype=self.dtype)
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
    """Read side: `arr[i]` is sequence i as a numpy array (token ids as int64); `sizes` their lengths in rows.

    width: values per row (None for token ids, 80 for filterbank frames)."""

    def __init__(self, prefix: Path, dtype=np.int32, width: int | None = None, out_dtype=np.int64):
        prefix = Path(prefix)
        self.out_dtype = out_dtype
        bin_path, idx_path = prefix.with_name(prefix.name + ".bin"), prefix.with_name(prefix.name + ".idx")
        if not bin_path.is_file() or not idx_path.is_file():
            raise FileNotFoundError(f"{bin_path}: binarized data missing; run "
                                    f"`{prepare_command(bin_path.parent.name)}` again")
        self.offsets = np.fromfile(idx_path, dtype=np.int64)
        row_bytes = np.dtype(dtype).itemsize * (width or 1)
        n_rows = bin_path.stat().st_size // row_bytes
        if len(self.offsets) == 0 or self.offsets[-1] != n_rows:
            raise ValueError(f"{bin_path}: index and data disagree (corrupt or half-written); prepare it again")
        self.data = np.memmap(bin_path, dtype=dtype, mode="r") if n_rows else np.zeros(0, dtype)
        if width:
            self.data = self.data.reshape(-1, width)
        self.sizes = np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, i: int) -> np.ndarray:
        return np.array(self.data[self.offsets[i]: self.offsets[i + 1]], dtype=self.out_dtype)
