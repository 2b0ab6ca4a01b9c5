"""Token-based batching: length-sorted batches under a token budget, seeded shuffle, sharding across ranks.

Update u of an epoch consumes global batches [u*G, (u+1)*G) where G = world_size * update_freq: rank r takes the
batches whose index is r modulo world_size. So one process with update_freq k and k processes with update_freq 1
see the same batches in each update.
"""

from __future__ import annotations

import numpy as np
import torch

from repro.data.binarized import TokenArray
from repro.data.text import EOS, PAD


def token_batches(sizes: np.ndarray, max_tokens: int, seed: int, epoch: int, shuffle: bool = True,
                  max_sentences: int | None = None) -> list[np.ndarray]:
    """Indices grouped so that (sequences in batch) * (longest in batch) <= max_tokens."""
    rng = np.random.default_rng([seed, epoch])
    tie = rng.random(len(sizes)) if shuffle else np.arange(len(sizes))
    order = np.lexsort((tie, sizes))
    batches, current, longest = [], [], 0
    for i in order:
        size = int(sizes[i])
        if size > max_tokens:
            continue  # a sequence longer than a whole batch is skipped
        new_longest = max(longest, size)
        if current and (new_longest * (len(current) + 1) > max_tokens or
                        (max_sentences and len(current) >= max_sentences)):
            batches.append(np.asarray(current))
            current, new_longest = [], size
        current.append(i)
        longest = new_longest
    if current:
        batches.append(np.asarray(current))
    if shuffle:
        perm = rng.permutation(len(batches))
        batches = [batches[j] for j in perm]
    return batches


def rank_batches(batches: list[np.ndarray], rank: int, world_size: int, update_freq: int) -> list[np.ndarray]:
    """This rank's share, trimmed to whole updates so that every rank runs the same number of steps."""
    per_update = world_size * update_freq
    usable = len(batches) // per_update * per_update
    return batches[:usable][rank::world_size]


def pad_right(seqs: list[np.ndarray], pad: int = PAD) -> torch.Tensor:
    out = torch.full((len(seqs), max(len(s) for s in seqs)), pad, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(s)
    return out


class ParallelData:
    """Source/target token arrays of one split. The source gets </s> appended (fairseq); the decoder input is
    </s> + target and the output target + </s>."""

    def __init__(self, corpus_dir, split: str, max_positions: int = 1024):
        self.src = TokenArray(corpus_dir / f"{split}.src")
        self.tgt = TokenArray(corpus_dir / f"{split}.tgt")
        if len(self.src) != len(self.tgt):
            raise ValueError(f"{corpus_dir}/{split}: {len(self.src)} sources but {len(self.tgt)} targets")
        self.sizes = np.maximum(self.src.sizes, self.tgt.sizes) + 1
        self.sizes[self.sizes > max_positions] = np.iinfo(np.int32).max  # never batched

    def __len__(self) -> int:
        return len(self.src)

    def collate(self, indices) -> dict:
        src = [np.append(self.src[i], EOS) for i in indices]
        tgt = [self.tgt[i] for i in indices]
        return {
            "ids": torch.as_tensor(np.asarray(indices)),
            "src": pad_right(src),
            "prev": pad_right([np.concatenate([[EOS], t]) for t in tgt]),
            "target": pad_right([np.append(t, EOS) for t in tgt]),
            "ntokens": sum(len(t) + 1 for t in tgt),
        }
