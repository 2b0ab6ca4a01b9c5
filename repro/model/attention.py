"""Multi-head attention through torch's scaled_dot_product_attention (in training on the CPU with attention dropout,
repro/model/cpu_paths.py's `attention`), with an incremental-decoding cache."""

from __future__ import annotations

import math

import torch
from torch import nn

from repro.model import cpu_paths
from repro.model.cpu_paths import Linear


class MultiheadAttention(nn.Module):
    """Self-attention (one fused QKV projection) or cross-attention (Q from the decoder, KV from the encoder).

    Tensors are batch-first: (batch, time, d_model). Masks are boolean with True meaning "may attend".
    """

    def __init__(self, d_model: int, heads: int, dropout: float, cross: bool, qkv_bias: str = "torch"):
        super().__init__()
        if qkv_bias not in ("torch", "zero"):
            raise ValueError(f"unknown qkv_bias {qkv_bias!r}")
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not divisible by heads {heads}")
        self.d_model, self.heads, self.dropout, self.cross = d_model, heads, dropout, cross
        if cross:
            self.q_proj = Linear(d_model, d_model)
            self.kv_proj = Linear(d_model, 2 * d_model)
        else:
            self.qkv_proj = Linear(d_model, 3 * d_model)
        self.out_proj = Linear(d_model, d_model)
        self.reset_parameters()
        if qkv_bias == "zero":  # older fairseq zeroes its fused in_proj_bias (the variant's `qkv_bias`)
            for lin in self._projections()[:-1]:
                nn.init.zeros_(lin.bias)

    def q_k_v_weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Views of the query, key and value weight matrices, wherever they are stored."""
        if self.cross:
            return (self.q_proj.weight, *self.kv_proj.weight.chunk(2, dim=0))
        return tuple(self.qkv_proj.weight.chunk(3, dim=0))

    @torch.no_grad()
    def reset_parameters(self, qkv_gain: float = 1 / math.sqrt(2)) -> None:
        # fairseq (0.9 on, fairseq/modules/multihead_attention.py reset_parameters): q, k, v each xavier_uniform
        # with gain 1/sqrt(2) (initialised as three separate matrices even where stored fused), the output
        # projection plain xavier and its bias zero; the q, k, v biases keep nn.Linear's own init (uniform in
        # +-1/sqrt(d), the same bound fused or separate).
        for w in self.q_k_v_weights():
            nn.init.xavier_uniform_(w, gain=qkv_gain)
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.out_proj.bias)

    def _projections(self) -> list[nn.Linear]:
        return [self.q_proj, self.kv_proj, self.out_proj] if self.cross else [self.qkv_proj, self.out_proj]

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.d_model // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                causal: bool = False, cache: dict | None = None) -> torch.Tensor:
        """x: queries (B, T, d). memory: encoder output for cross-attention. mask: (B, 1|T, S) or broadcastable.

        cache (incremental decoding): for self-attention it accumulates this layer's keys and values over steps;
        for cross-attention it holds the encoder's keys and values, computed once.
        """
        if self.cross:
            q = self._split(self.q_proj(x))
            if cache is not None and "k" in cache:
                k, v = cache["k"], cache["v"]
            else:
                k, v = (self._split(t) for t in self.kv_proj(memory).chunk(2, dim=-1))
                if cache is not None:
                    cache["k"], cache["v"] = k, v
        else:
            q, k, v = (self._split(t) for t in self.qkv_proj(x).chunk(3, dim=-1))
            if cache is not None:
                if "k" in cache:
                    k = torch.cat([cache["k"], k], dim=2)
                    v = torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
                causal = False  # one new query attends to every cached position
        if mask is not None:
            mask = mask.unsqueeze(1)  # broadcast over heads
        out = cpu_paths.attention(q, k, v, mask, causal, self.dropout if self.training else 0.0)
        b, h, t, dh = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, t, h * dh))
