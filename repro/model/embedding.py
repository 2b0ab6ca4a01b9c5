"""Token embeddings scaled by sqrt(d) plus sinusoidal positions (Vaswani et al. 2017; fairseq's layout)."""

from __future__ import annotations

import math

import torch
from torch import nn

from repro.model.cpu_paths import Dropout


def sinusoidal_positions(length: int, d_model: int, offset: int = 0, device=None) -> torch.Tensor:
    """(length, d_model): sin in the first half of the channels, cos in the second, as fairseq lays them out."""
    half = d_model // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float32, device=device) * -(math.log(10000.0) / (half - 1)))
    pos = torch.arange(offset, offset + length, dtype=torch.float32, device=device).unsqueeze(1)
    table = torch.cat([torch.sin(pos * freq), torch.cos(pos * freq)], dim=1)
    if d_model % 2:
        table = torch.cat([table, torch.zeros(length, 1, device=device)], dim=1)
    return table


class TokenEmbedding(nn.Embedding):
    """N(0, d^-1/2) initialisation, zero padding row (fairseq)."""

    def __init__(self, vocab_size: int, d_model: int, pad_idx: int):
        super().__init__(vocab_size, d_model, padding_idx=pad_idx)
        nn.init.normal_(self.weight, mean=0.0, std=d_model ** -0.5)
        with torch.no_grad():
            self.weight[pad_idx].zero_()


class PositionalInput(nn.Module):
    """x * sqrt(d) + positions, then dropout: the input to a layer stack, whatever produced x.

    The first position is `first` (fairseq: the padding index + 1, so 2: `make_positions` in fairseq/utils.py counts
    from padding_idx + 1, and SinusoidalPositionalEmbedding looks those rows up; tests/test_reference.py runs it).
    Sequences are right-padded, so a row's tokens take positions first, first + 1, ... as fairseq gives them. A padded
    place (`keep` False) gets no position, as fairseq's `make_positions` gives it the padding row (zeros): its input
    is the padding embedding, zero for text. Nothing attends to it, but statistics over whole batches see it (Admin's
    profiling pass, Transformer-Clinic's np.var over every position)."""

    def __init__(self, d_model: int, dropout: float, first: int = 0):
        super().__init__()
        self.d_model, self.scale, self.first = d_model, math.sqrt(d_model), first
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor, offset: int = 0, keep: torch.Tensor | None = None) -> torch.Tensor:
        pos = sinusoidal_positions(x.size(1), self.d_model, self.first + offset, device=x.device).to(x.dtype)
        if keep is not None:
            pos = pos * keep.unsqueeze(-1).to(x.dtype)
        return self.dropout(self.scale * x + pos)
