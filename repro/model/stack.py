"""A stack of layers: plain, or with DLCL's dynamic linear combination of lower layers; optional final LN."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from repro.model.block import TransformerLayer
from repro.model.block import make_norm
from repro.model.variants import Variant, b2t_2023_scale, b2t_noln_alpha, b2t_noln_beta, mix_ln_post_layers


class DLCLCombination(nn.Module):
    """Wang et al. 2019 (pre-norm, as in the official code): the input of layer l+1 is

        sum_{k <= l} W[l, k] * LN_k(y_k)

    with y_0 the embedding output (not normalised), y_k the output of layer k, and W a learnable lower-triangular
    matrix initialised to the plain average 1/(l+1). Row L gives the stack's output (before the final LN).
    """

    def __init__(self, num_layers: int, d_model: int):
        super().__init__()
        self.num_layers = num_layers
        rows = torch.arange(num_layers + 1).unsqueeze(1)
        cols = torch.arange(num_layers + 1).unsqueeze(0)
        self.register_buffer("tril", (cols <= rows).float())
        self.weights = nn.Parameter(self.tril / (rows + 1).float())
        self.norms = nn.ModuleList([nn.Identity()] + [nn.LayerNorm(d_model) for _ in range(num_layers)])

    def store(self, k: int, y: torch.Tensor) -> torch.Tensor:
        """y_k as every later combination reads it: normalised once, when stored (as the official code's
        LearnableDenseLayerHistory.add, wangqiangneu/dlcl fairseq/modules/layer_history.py), not once per reader."""
        return self.norms[k](y)

    def combine(self, stored: list[torch.Tensor]) -> torch.Tensor:
        """Input to the next layer (or the stack's output) from the normalised outputs stored so far: one weighted
        sum over them stacked (that file's pop), a few launches whatever the depth."""
        row = len(stored) - 1
        w = self.weights[row, : row + 1]  # the lower triangle's row: tril[row] is one on exactly these
        return (torch.stack(stored) * w.view(-1, *(1,) * stored[0].dim())).sum(0)


class LayerStack(nn.Module):
    def __init__(self, variant: Variant, num_layers: int, d_model: int, ffn_dim: int, heads: int,
                 dropout: float, attention_dropout: float, activation_dropout: float, cross_attention: bool,
                 residual_alpha: float = 1.0, final_norm: bool | None = None):
        super().__init__()
        self.variant, self.num_layers = variant, num_layers
        if variant.b2t == "scaled_no_ln":
            alpha, beta = b2t_noln_alpha(num_layers), b2t_noln_beta(d_model)
        else:
            alpha, beta = residual_alpha, 1.0
        # Mix-LN: the lowest layers Post-LN, the rest as the row says
        lower = mix_ln_post_layers(variant.post_ln_fraction, num_layers)
        post_variant = dataclasses.replace(variant, pre_norm=False, post_norm=True, final_norm=False)
        self.layers = nn.ModuleList(
            TransformerLayer(post_variant if i < lower else variant, d_model, ffn_dim, heads, dropout,
                             attention_dropout, activation_dropout, cross_attention, alpha=alpha, beta=beta)
            for i in range(num_layers))
        self.dlcl = DLCLCombination(num_layers, d_model) if variant.dlcl else None
        use_final = variant.final_norm if final_norm is None else final_norm
        # ResiDual: the final norm is of the dual stream, added to the Post-LN stream's output; its eps is 1e-7
        # (microsoft/ResiDual resi_dual/resi_dual.py: LayerNorm(..., eps=1e-7) in ResiDualEncoder and ResiDualDecoder)
        self.final_norm = make_norm(use_final, d_model, variant.norm, eps=1e-7 if variant.dual_stream else 1e-5)

    def extra_repr(self) -> str:
        s = f"{self.num_layers} layers"
        if self.variant.init == "b2t_depth_scaled" and self.num_layers:
            s += f", init weights x N^-0.5 = {b2t_2023_scale(self.num_layers):.4f}"
        if self.variant.post_ln_fraction:
            s += f", Post-LN layers {mix_ln_post_layers(self.variant.post_ln_fraction, self.num_layers)}"
        if self.variant.dual_stream:
            s += ", dual stream + final norm"
        return s

    def forward(self, x: torch.Tensor, self_mask: torch.Tensor | None = None, causal: bool = False,
                memory: torch.Tensor | None = None, memory_mask: torch.Tensor | None = None,
                cache: list[dict] | None = None, layer_outputs: list[torch.Tensor] | None = None) -> torch.Tensor:
        """layer_outputs, if given, receives each layer's output hidden states (bottom layer first)."""
        history = [self.dlcl.store(0, x)] if self.dlcl is not None else None
        dual = x if self.variant.dual_stream else None  # ResiDual's second stream starts at the embedding
        for i, layer in enumerate(self.layers):
            if history is not None:
                x = self.dlcl.combine(history)
            x = layer(x, self_mask=self_mask, causal=causal, memory=memory, memory_mask=memory_mask,
                      cache=None if cache is None else cache[i], dual=dual)
            if dual is not None:
                x, dual = x
            if layer_outputs is not None:
                layer_outputs.append(x)
            if history is not None:
                history.append(self.dlcl.store(i + 1, x))
        if history is not None:
            x = self.dlcl.combine(history)
        if dual is not None:
            return x + self.final_norm(dual)
        return self.final_norm(x)
