"""Linear and dropout layers with faster fp32 CPU paths, the same layers everywhere else.

Linear: torch sends fp32 CPU matrix products to MKL, which on AMD processors takes its AVX2 path: about 90 GFLOP/s on
one core of an AVX-512 EPYC. oneDNN, which torch ships too, chooses its kernels by instruction set and runs the
same fp32 products 1.4-2.5x faster there (benchmarks/README.md, "The mini configuration on this CPU"). On an Intel
processor MKL takes its AVX-512 kernels, reads transposed operands in place (oneDNN's operator copies them) and
the mini step ran 4% faster with it ("Where a mini step's time goes"), so the products stay MKL's there. The
arithmetic stays fp32; only the order of the sums differs, so results agree to fp32 rounding. Everywhere else
(GPU, autocast, half precision, torch.compile, a build without oneDNN) this is plain F.linear.

Dropout: on the CPU, torch's dropout draws its mask with bernoulli_, 2.7x slower than drawing uniforms and
comparing (measured forward and backward at 2,048 x 128). Same distribution, another random stream.

Attention with dropout: torch's CPU flash kernel takes no dropout, so scaled_dot_product_attention falls back to its
math path, which draws the mask with bernoulli_ and checks every row for being wholly masked (`_safe_softmax`). The
language model and speech recipes train with attention dropout; `attention` computes the same product here, its
mask drawn as Dropout draws it (benchmarks/README.md, "Attention dropout on the CPU").

keep_freed_memory: glibc hands every allocation over its mmap threshold straight back to the system when freed,
so each step's activation buffers are fresh pages, faulted in one by one: a 64 MB clone takes 45 ms instead of 4.
Training and decoding on the CPU call it once to keep freed memory in the process for reuse.
"""

from __future__ import annotations

import ctypes
import platform
import sys

import torch
import torch.nn.functional as F
from torch import nn

from repro.provenance import cpuinfo


def _onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


ONEDNN = _onednn_available()
# the faster library for this processor's products (measured; module docstring)
USE_ONEDNN = ONEDNN and cpuinfo().get("vendor_id") != "GenuineIntel"
ENABLED = True  # False: plain torch layers everywhere (benchmarks/mini_step.py --plain compares the two)

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's malloc.h


def keep_freed_memory() -> bool:
    """glibc: no mmap'd allocations and no trimming, so freed buffers are reused. False where it does not apply."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 2 ** 31 - 1))
    except (OSError, AttributeError):
        return False


def _plain(t: torch.Tensor) -> torch.Tensor:
    """t if it is a row-major matrix or the transpose of one (oneDNN reads both in place), else a row-major copy:
    other strides (a column slice of a wider gradient, say) send oneDNN to a reference kernel 1,000x slower."""
    return t if t.is_contiguous() or t.t().is_contiguous() else t.contiguous()


def _a_bt(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """a @ b.T (+ bias) for 2-D fp32 CPU tensors, through oneDNN."""
    return torch.ops.mkldnn._linear_pointwise(_plain(a), _plain(b), bias, "none", [], "")


class _OneDNNLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _a_bt(x.reshape(-1, x.shape[-1]), weight, bias).view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        g = _plain(grad.reshape(-1, grad.shape[-1]))
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = _a_bt(g, weight.t()).view(*x.shape[:-1], weight.shape[1])
        if ctx.needs_input_grad[1]:
            x2 = x.reshape(-1, x.shape[-1])
            out_features, in_features = weight.shape
            # oneDNN is fastest with the larger of the two weight dimensions as its output columns (measured).
            gw = _a_bt(x2.t(), g.t()).t() if out_features >= in_features else _a_bt(g.t(), x2.t())
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = g.sum(0)
        return gx, gw, gb


def applies(x: torch.Tensor) -> bool:
    """Whether the CPU paths take x: fp32 on the CPU outside autocast, compilation and torch.func's transforms (a
    group's vmap, repro/train/group.py: oneDNN's operator has no batching rule)."""
    return (ENABLED and x.device.type == "cpu" and x.dtype == torch.float32 and not torch.is_autocast_enabled("cpu")
            and not torch.compiler.is_compiling() and torch._C._functorch.maybe_current_level() is None)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear, through oneDNN where USE_ONEDNN and the CPU paths apply."""
    if USE_ONEDNN and applies(x) and weight.dtype == torch.float32 and x.numel() > 0:
        return _OneDNNLinear.apply(x, weight, bias)
    return F.linear(x, weight, bias)


class Linear(nn.Linear):
    """nn.Linear (same parameters, initialisation and state-dict keys) computed by `linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


class Dropout(nn.Dropout):
    """nn.Dropout; in training on the CPU, its mask comes from uniform draws (see the module's docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (ENABLED and self.training and 0.0 < self.p < 1.0 and x.device.type == "cpu" and not self.inplace
                and not torch.compiler.is_compiling()):
            if torch._C._functorch.maybe_current_level() is not None:  # under vmap: an out-of-place compare,
                # which has a batching rule (the in-place one would run member by member)
                return x * torch.rand_like(x).ge(self.p) * (1.0 / (1.0 - self.p))
            return x * torch.rand_like(x).ge_(self.p).mul_(1.0 / (1.0 - self.p))
        return super().forward(x)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
              dropout_p: float) -> torch.Tensor:
    """F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal and mask is
    None), computed here where the CPU paths apply and dropout_p > 0 (see the module's docstring). mask is boolean,
    True where a query may attend; a query that may attend nowhere gets zeros, as torch's math path gives it."""
    if not (ENABLED and 0.0 < dropout_p < 1.0 and applies(q)):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                              is_causal=causal and mask is None)
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)
    if mask is not None:
        scores.masked_fill_(~mask, float("-inf"))
    elif causal:
        t, s = scores.shape[-2:]
        scores.masked_fill_(torch.ones(t, s, dtype=torch.bool).triu_(1), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    reaches = mask.any(dim=-1, keepdim=True) if mask is not None else None
    if reaches is not None and not reaches.all():
        probs = probs.masked_fill(~reaches, 0.0)
    # the kept probabilities times v / (1 - p): the scale on v, the smaller operand
    return (probs * torch.rand_like(probs).ge_(dropout_p)) @ (v * (1.0 / (1.0 - dropout_p)))
