"""Adaptive input representations and adaptive softmax (Baevski & Auli 2019; Grave et al. 2017), tied.

The vocabulary (sorted by frequency) is split into bands at `cutoffs`; band i has embedding size d / factor^i and
a projection to d. The softmax's head scores band 0's words with band 0's embedding matrix directly (no projection:
the band is already d wide) plus one logit per tail band; a tail band's words are scored only for the tokens whose
target lies in it, through the transposed input projection, dropout, then the band's embedding. Word matrices and
projections are shared between input and output, as in fairseq's transformer_lm_wiki103 (tie_adaptive_weights,
tie_adaptive_proj; `fairseq/modules/adaptive_softmax.py`: TiedHeadModule and _make_tail). In training, dropout
(adaptive_softmax_dropout, 0.2) is applied to the softmax input as well as inside the tails.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from repro.model.cpu_paths import Dropout, Linear, linear


def _transformed() -> bool:
    """Inside a torch.func transform (a group's vmap, repro/train/group.py), which cannot select rows by value: there
    every band is computed for every token and the value of the token's own band kept, the same numbers at more
    cost."""
    return torch._C._functorch.maybe_current_level() is not None


def band_edges(vocab_size: int, cutoffs: list[int]) -> list[int]:
    edges = [0] + [c for c in cutoffs if c < vocab_size] + [vocab_size]
    if any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"cutoffs {cutoffs} must increase and lie below the vocabulary size {vocab_size}")
    return edges


class AdaptiveInput(nn.Module):
    def __init__(self, vocab_size: int, d_model: int, cutoffs: list[int], factor: float, pad_idx: int):
        super().__init__()
        self.d_model, self.pad_idx = d_model, pad_idx
        self.edges = band_edges(vocab_size, cutoffs)
        self.embeddings = nn.ModuleList()
        self.projections = nn.ModuleList()
        for i, (lo, hi) in enumerate(zip(self.edges, self.edges[1:])):
            dim = int(d_model // (factor ** i))
            emb = nn.Embedding(hi - lo, dim)
            nn.init.normal_(emb.weight, 0.0, dim ** -0.5)
            proj = Linear(dim, d_model, bias=False)
            nn.init.xavier_uniform_(proj.weight)
            self.embeddings.append(emb)
            self.projections.append(proj)
        with torch.no_grad():
            if pad_idx < self.edges[1]:
                self.embeddings[0].weight[pad_idx].zero_()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if _transformed():  # under vmap: every band for every token, kept where the token lies in it
            out = 0.0
            for i, (lo, hi) in enumerate(zip(self.edges, self.edges[1:])):
                band = self.projections[i](self.embeddings[i]((tokens - lo).clamp(0, hi - lo - 1)))
                out = out + band * ((tokens >= lo) & (tokens < hi)).unsqueeze(-1)
            return out
        out = tokens.new_zeros(*tokens.shape, self.d_model, dtype=self.projections[0].weight.dtype)
        for i, (lo, hi) in enumerate(zip(self.edges, self.edges[1:])):
            in_band = (tokens >= lo) & (tokens < hi)
            if in_band.any():
                # under autocast the projection returns the autocast dtype; the sum stays in the weights' dtype
                out[in_band] = self.projections[i](self.embeddings[i](tokens[in_band] - lo)).to(out.dtype)
        return out


class AdaptiveSoftmax(nn.Module):
    def __init__(self, adaptive_input: AdaptiveInput, dropout: float):
        super().__init__()
        self.inp = adaptive_input  # tied words and projections
        self.edges = adaptive_input.edges
        n_tail = len(self.edges) - 2
        self.cluster_logits = Linear(adaptive_input.d_model, n_tail, bias=False) if n_tail else None
        self.dropout = Dropout(dropout)

    def _band_logits(self, x: torch.Tensor, i: int) -> torch.Tensor:
        if i == 0:  # the head: band 0's words scored with its embedding directly
            return linear(x, self.inp.embeddings[0].weight)
        # The input projection maps band dim -> d; its transpose maps d -> band dim.
        h = self.dropout(linear(x, self.inp.projections[i].weight.t()))
        return linear(h, self.inp.embeddings[i].weight)

    def _head_logprobs(self, x: torch.Tensor) -> torch.Tensor:
        head = self._band_logits(x, 0)
        if self.cluster_logits is not None:
            head = torch.cat([head, self.cluster_logits(x)], dim=-1)
        return F.log_softmax(head.float(), dim=-1)

    def log_probs(self, x: torch.Tensor) -> torch.Tensor:
        """Full log-distribution over the vocabulary, (..., V)."""
        head = self._head_logprobs(x)
        n0 = self.edges[1]
        parts = [head[..., :n0]]
        for i in range(1, len(self.edges) - 1):
            parts.append(head[..., n0 + i - 1: n0 + i] + F.log_softmax(self._band_logits(x, i).float(), dim=-1))
        return torch.cat(parts, dim=-1)

    def target_log_probs(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """log p(target) per position, computing each tail band only for the tokens whose target lies in it."""
        x, target = self.dropout(x.reshape(-1, x.size(-1))), target.reshape(-1)
        head = self._head_logprobs(x)
        n0 = self.edges[1]
        if _transformed():  # under vmap: every tail for every token, each value kept where its target lies
            out = torch.where(target < n0, head.gather(1, target.clamp(max=n0 - 1).unsqueeze(1)).squeeze(1), 0.0)
            for i in range(1, len(self.edges) - 1):
                lo, hi = self.edges[i], self.edges[i + 1]
                tail = F.log_softmax(self._band_logits(x, i).float(), dim=-1)
                value = head[:, n0 + i - 1] + tail.gather(1, (target - lo).clamp(0, hi - lo - 1).unsqueeze(1)).squeeze(1)
                out = torch.where((target >= lo) & (target < hi), value, out)
            return out
        out = head.new_zeros(target.shape)
        in_head = target < n0
        out[in_head] = head[in_head].gather(1, target[in_head].unsqueeze(1)).squeeze(1)
        for i in range(1, len(self.edges) - 1):
            lo, hi = self.edges[i], self.edges[i + 1]
            sel = (target >= lo) & (target < hi)
            if sel.any():
                tail = F.log_softmax(self._band_logits(x[sel], i).float(), dim=-1)
                out[sel] = head[sel, n0 + i - 1] + tail.gather(1, (target[sel] - lo).unsqueeze(1)).squeeze(1)
        return out
