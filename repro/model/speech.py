"""Speech front end for the ASR encoder: fairseq S2T's convolutional subsampler (Wang et al. 2020)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Conv1dSubsampler(nn.Module):
    """Two Conv1d layers (kernel 5, stride 2), each followed by a GLU over channels: 4x fewer frames.

    80-dim filterbanks -> mid_channels -> GLU -> 2*d_model -> GLU -> d_model (s2t_transformer: mid 1024).
    """

    def __init__(self, in_channels: int, mid_channels: int, d_model: int, kernel_sizes: tuple[int, ...] = (5, 5)):
        super().__init__()
        self.kernel_sizes = kernel_sizes
        n = len(kernel_sizes)
        self.convs = nn.ModuleList(
            nn.Conv1d(in_channels if i == 0 else mid_channels // 2,
                      mid_channels if i < n - 1 else d_model * 2, k, stride=2, padding=k // 2)
            for i, k in enumerate(kernel_sizes))

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        for _ in self.kernel_sizes:
            lengths = torch.div(lengths - 1, 2, rounding_mode="floor") + 1
        return lengths

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """features (B, T, C) -> (B, ~T/4, d_model) and the new lengths."""
        x = features.transpose(1, 2)
        for conv in self.convs:
            x = F.glu(conv(x), dim=1)
        return x.transpose(1, 2), self.output_lengths(lengths)
