"""One Transformer layer for every variant: sublayers with named norm slots, a residual combiner and the B2T skip.

The forward reads like the paper's equations:

    Post-LN (eq. 1):  x = LN(x + F(x))
    Pre-LN  (eq. 2):  x = x + F(LN(x))
    B2T     (eq. 5):  out = LN_last(x_inp + x_ffn + FFN(x_ffn))
    B2T w/o LN (eq. 6):  out = alpha * x_inp + beta * (x_ffn + FFN(x_ffn))
    DeepNet:  x = LN(alpha * x + F(x))        Admin:  x = LN(omega (.) x + F(x))

Norm slots that a variant does not use hold nn.Identity, so `print(model)` shows exactly which norms exist.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from repro.model.attention import MultiheadAttention
from repro.model.cpu_paths import Dropout, Linear
from repro.model.variants import Variant


def make_norm(used: bool, d_model: int) -> nn.Module:
    return nn.LayerNorm(d_model) if used else nn.Identity()


class Residual(nn.Module):
    """The scale applied to the skip path x before `x + F(x)`: 1, DeepNet's constant alpha, or Admin's omega."""

    def __init__(self, kind: str, d_model: int, alpha: float = 1.0):
        super().__init__()
        self.kind = kind
        if kind == "deepnet_alpha":
            self.register_buffer("alpha", torch.tensor(float(alpha)))
        elif kind == "admin_omega":
            self.omega = nn.Parameter(torch.ones(d_model))
        elif kind != "identity":
            raise ValueError(f"unknown residual kind {kind!r}")
        # Admin profiling (repro/model/init.py) sets this to a shared {"r": running scale} for one forward pass.
        self.admin_profile: dict | None = None

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        if self.kind == "identity":
            return x + fx
        if self.kind == "deepnet_alpha":
            return self.alpha * x + fx
        if self.admin_profile is not None:
            # Liu et al. 2020: omega_i is the output scale accumulated by all earlier sublayers of this stack.
            with torch.no_grad():
                self.omega.fill_(self.admin_profile["r"])
                self.admin_profile["r"] = math.sqrt((x * self.omega).var().item() + fx.var().item())
        return x * self.omega + fx

    def extra_repr(self) -> str:
        return f"{self.kind}" + (f", alpha={self.alpha.item():.4f}" if self.kind == "deepnet_alpha" else "")


class FeedForward(nn.Module):
    """fc2(dropout(relu(fc1(x)))); `init` is the variant's `ffn_init` (repro/model/variants.py names the source)."""

    def __init__(self, d_model: int, ffn_dim: int, activation_dropout: float, init: str = "torch"):
        super().__init__()
        self.fc1 = Linear(d_model, ffn_dim)
        self.fc2 = Linear(ffn_dim, d_model)
        self.activation_dropout = Dropout(activation_dropout)
        if init == "xavier":  # older fairseq's Linear(): xavier_uniform weights, zero biases
            for fc in (self.fc1, self.fc2):
                nn.init.xavier_uniform_(fc.weight)
                nn.init.zeros_(fc.bias)
        elif init != "torch":  # "torch": nn.Linear's own initialisation, as the authors' fork builds it
            raise ValueError(f"unknown FFN init {init!r}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.activation_dropout(F.relu(self.fc1(x))))


class TransformerLayer(nn.Module):
    """An encoder layer (self-attention, FFN) or a decoder layer (self-attention, cross-attention, FFN).

    alpha/beta: the B2T w/o LN constants (eq. 7-8) or DeepNet's residual alpha, computed by the stack from depth.
    """

    def __init__(self, variant: Variant, d_model: int, ffn_dim: int, heads: int, dropout: float,
                 attention_dropout: float, activation_dropout: float, cross_attention: bool,
                 alpha: float = 1.0, beta: float = 1.0):
        super().__init__()
        self.variant = variant
        self.b2t = variant.b2t
        self.dropout = Dropout(dropout)
        pre, post = variant.pre_norm, variant.post_norm

        self.pre_attn_norm = make_norm(pre, d_model)
        self.self_attn = MultiheadAttention(d_model, heads, attention_dropout, cross=False)
        self.attn_residual = Residual(variant.residual, d_model, alpha)
        self.post_attn_norm = make_norm(post, d_model)

        self.cross_attention = cross_attention
        if cross_attention:
            self.pre_cross_norm = make_norm(pre, d_model)
            self.cross_attn = MultiheadAttention(d_model, heads, attention_dropout, cross=True)
            self.cross_residual = Residual(variant.residual, d_model, alpha)
            self.post_cross_norm = make_norm(post, d_model)

        self.pre_ffn_norm = make_norm(pre, d_model)
        self.ffn = FeedForward(d_model, ffn_dim, activation_dropout, variant.ffn_init)
        self.ffn_residual = Residual(variant.residual, d_model, alpha)
        # B2T keeps the layer's last LN (footnote 1); B2T w/o LN has none.
        self.post_ffn_norm = make_norm(post, d_model)
        if self.b2t == "scaled_no_ln":
            self.register_buffer("b2t_alpha", torch.tensor(float(alpha)))
            self.register_buffer("b2t_beta", torch.tensor(float(beta)))
        # Optional observation points for the gradient-flow analysis (figures 4 and 7).
        self.probe: list[torch.Tensor] | None = None

    def _observe(self, name: str, x: torch.Tensor) -> torch.Tensor:
        if self.probe is not None and x.requires_grad:
            x.retain_grad()
            self.probe.append((name, x))
        return x

    def forward(self, x: torch.Tensor, self_mask: torch.Tensor | None = None, causal: bool = False,
                memory: torch.Tensor | None = None, memory_mask: torch.Tensor | None = None,
                cache: dict | None = None) -> torch.Tensor:
        x_inp = x

        h = self.dropout(self.self_attn(self.pre_attn_norm(x), mask=self_mask, causal=causal,
                                        cache=None if cache is None else cache.setdefault("self", {})))
        x = self._observe("self-attn sum", self.attn_residual(x, h))
        x = self._observe("self-attn LN", self.post_attn_norm(x))

        if self.cross_attention:
            h = self.dropout(self.cross_attn(self.pre_cross_norm(x), memory=memory, mask=memory_mask,
                                             cache=None if cache is None else cache.setdefault("cross", {})))
            x = self._observe("cross-attn sum", self.cross_residual(x, h))
            x = self._observe("cross-attn LN", self.post_cross_norm(x))

        x_ffn = x
        h = self.dropout(self.ffn(self.pre_ffn_norm(x_ffn)))
        x = self.ffn_residual(x_ffn, h)
        if self.b2t == "with_ln":
            x = x_inp + x                                    # eq. 5: x_inp + x_ffn + FFN(x_ffn)
        elif self.b2t == "scaled_no_ln":
            x = self.b2t_alpha * x_inp + self.b2t_beta * x   # eq. 6
        x = self._observe("FFN sum", x)
        return self._observe("last LN", self.post_ffn_norm(x))

    def extra_repr(self) -> str:
        s = f"variant={self.variant.name}"
        if self.b2t == "scaled_no_ln":
            s += f", b2t_alpha={self.b2t_alpha.item():.4f}, b2t_beta={self.b2t_beta.item():.4f}"
        return s
