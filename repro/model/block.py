"""One Transformer layer for every variant: sublayers with named norm slots, a residual combiner and the B2T skip.

The forward reads like the paper's equations:

    Post-LN (eq. 1):  x = LN(x + F(x))
    Pre-LN  (eq. 2):  x = x + F(LN(x))
    B2T     (eq. 5):  out = LN_last(x_inp + x_ffn + FFN(x_ffn))
    B2T w/o LN (eq. 6):  out = alpha * x_inp + beta * (x_ffn + FFN(x_ffn))
    DeepNet:  x = LN(alpha * x + F(x))        Admin:  x = LN(omega (.) x + F(x))
    Peri-LN:  x = x + LN_out(drop(F(LN_in(x))))   ReZero: x = x + a * F(x), one a per layer, 0 at start
    ResiDual: x = LN(x + F(x)) and, beside it, d = d + F(x)
    DyT:      every LN(z) becomes gamma * tanh(a * z) + beta

Norm slots that a variant does not use hold nn.Identity, so `print(model)` shows exactly which norms exist.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from repro.model.attention import MultiheadAttention
from repro.model.cpu_paths import Dropout, Linear
from repro.model.variants import DYT_ALPHA_INIT, Variant


class DyT(nn.Module):
    """Dynamic Tanh (Zhu et al. 2025), a LayerNorm's replacement: gamma * tanh(alpha * x) + beta, alpha one learned
    scalar, gamma and beta per channel (jiachenzhu/DyT dynamic_tanh.py)."""

    def __init__(self, d_model: int, alpha_init: float = DYT_ALPHA_INIT):
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(float(alpha_init)))
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * torch.tanh(self.alpha * x) + self.bias

    def extra_repr(self) -> str:
        return f"{self.weight.numel()}, alpha={self.alpha.item():.4f}"


def make_norm(used: bool, d_model: int, kind: str = "layernorm", eps: float = 1e-5) -> nn.Module:
    if not used:
        return nn.Identity()
    if kind == "dyt":
        return DyT(d_model)
    if kind != "layernorm":
        raise ValueError(f"unknown norm {kind!r}")
    return nn.LayerNorm(d_model, eps=eps)


class Residual(nn.Module):
    """The scale applied to the skip path x before `x + F(x)`: 1, DeepNet's constant alpha, or Admin's omega."""

    def __init__(self, kind: str, d_model: int, alpha: float = 1.0):
        super().__init__()
        self.kind = kind
        if kind == "deepnet_alpha":
            self.register_buffer("alpha", torch.tensor(float(alpha)))
        elif kind == "admin_omega":
            self.omega = nn.Parameter(torch.ones(d_model))
        elif kind == "rezero":
            self.alpha = nn.Parameter(torch.zeros(()))  # Bachlechner et al. 2020: the gate starts closed
        elif kind != "identity":
            raise ValueError(f"unknown residual kind {kind!r}")
        # Admin profiling (repro/model/init.py) sets this to a shared {"r": running scale} for one forward pass.
        self.admin_profile: dict | None = None

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        if self.kind == "identity":
            return x + fx
        if self.kind == "deepnet_alpha":
            return self.alpha * x + fx
        if self.kind == "rezero":
            return x + self.alpha * fx
        if self.admin_profile is not None:
            # Liu et al. 2020: omega_i is the output scale accumulated by all earlier sublayers of this stack; the
            # variances over every element, padded places included, as np.var (Transformer-Clinic transformer_layer.py)
            with torch.no_grad():
                self.omega.fill_(self.admin_profile["r"])
                self.admin_profile["r"] = math.sqrt((x * self.omega).var(unbiased=False).item()
                                                    + fx.var(unbiased=False).item())
        return x * self.omega + fx

    def extra_repr(self) -> str:
        return f"{self.kind}" + (f", alpha={self.alpha.item():.4f}" if self.kind in ("deepnet_alpha", "rezero") else "")


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
        pre, post, out = variant.pre_norm, variant.post_norm, variant.out_norm
        norm = lambda used: make_norm(used, d_model, variant.norm)

        self.pre_attn_norm = norm(pre)
        self.self_attn = MultiheadAttention(d_model, heads, attention_dropout, cross=False,
                                            qkv_bias=variant.qkv_bias)
        self.attn_out_norm = norm(out)
        self.attn_residual = Residual(variant.residual, d_model, alpha)
        self.post_attn_norm = norm(post)

        self.cross_attention = cross_attention
        if cross_attention:
            self.pre_cross_norm = norm(pre)
            self.cross_attn = MultiheadAttention(d_model, heads, attention_dropout, cross=True,
                                                 qkv_bias=variant.qkv_bias)
            self.cross_out_norm = norm(out)
            self.cross_residual = Residual(variant.residual, d_model, alpha)
            self.post_cross_norm = norm(post)

        self.pre_ffn_norm = norm(pre)
        self.ffn = FeedForward(d_model, ffn_dim, activation_dropout, variant.ffn_init)
        self.ffn_out_norm = norm(out)
        self.ffn_residual = Residual(variant.residual, d_model, alpha)
        if variant.residual == "rezero":  # one gate per layer, shared by its sublayers (rztx.py `resweight`)
            self.ffn_residual = self.attn_residual
            if cross_attention:
                self.cross_residual = self.attn_residual
        # B2T keeps the layer's last LN (footnote 1); B2T w/o LN has none.
        self.post_ffn_norm = norm(post)
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
                cache: dict | None = None, dual: torch.Tensor | None = None):
        """The layer's output; with `dual` (ResiDual's second stream, the variant's `dual_stream`), the pair
        (output, dual stream plus every sublayer's output)."""
        x_inp = x

        # Peri-LN's output norm takes the dropped-out output (CogView's Sandwich-LN, x-transformers' sandwich_norm);
        # for every other variant it is the identity, and the order does not matter.
        h = self.attn_out_norm(self.dropout(self.self_attn(self.pre_attn_norm(x), mask=self_mask, causal=causal,
                                                           cache=None if cache is None else cache.setdefault("self", {}))))
        dual = None if dual is None else dual + h
        x = self._observe("self-attn sum", self.attn_residual(x, h))
        x = self._observe("self-attn LN", self.post_attn_norm(x))

        if self.cross_attention:
            h = self.cross_out_norm(self.dropout(self.cross_attn(self.pre_cross_norm(x), memory=memory, mask=memory_mask,
                                                                 cache=None if cache is None else cache.setdefault("cross", {}))))
            dual = None if dual is None else dual + h
            x = self._observe("cross-attn sum", self.cross_residual(x, h))
            x = self._observe("cross-attn LN", self.post_cross_norm(x))

        x_ffn = x
        h = self.ffn_out_norm(self.dropout(self.ffn(self.pre_ffn_norm(x_ffn))))
        dual = None if dual is None else dual + h
        x = self.ffn_residual(x_ffn, h)
        if self.b2t == "with_ln":
            x = x_inp + x                                    # eq. 5: x_inp + x_ffn + FFN(x_ffn)
        elif self.b2t == "scaled_no_ln":
            x = self.b2t_alpha * x_inp + self.b2t_beta * x   # eq. 6
        x = self._observe("FFN sum", x)
        x = self._observe("last LN", self.post_ffn_norm(x))
        return x if dual is None else (x, dual)

    def extra_repr(self) -> str:
        s = f"variant={self.variant.name}"
        if self.variant.post_ln_fraction:
            s += f", {'Post-LN' if self.variant.post_norm else 'Pre-LN'} layer"
        if self.b2t == "scaled_no_ln":
            s += f", b2t_alpha={self.b2t_alpha.item():.4f}, b2t_beta={self.b2t_beta.item():.4f}"
        return s
