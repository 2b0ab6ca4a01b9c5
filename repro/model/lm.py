"""Decoder-only language model with adaptive input and adaptive softmax (fairseq transformer_lm_wiki103)."""

from __future__ import annotations

import torch
from torch import nn

from repro.model.adaptive import AdaptiveInput, AdaptiveSoftmax
from repro.model.embedding import PositionalInput
from repro.model.stack import LayerStack
from repro.model.variants import Variant, deepnet_constants


class LanguageModel(nn.Module):
    def __init__(self, variant: Variant, vocab_size: int, pad_idx: int, d_model: int, ffn_dim: int, heads: int,
                 layers: int, dropout: float, attention_dropout: float, activation_dropout: float,
                 cutoffs: list[int], factor: float, softmax_dropout: float = 0.2):
        super().__init__()
        self.variant, self.d_model, self.decoder_layers = variant, d_model, layers
        alpha = deepnet_constants(0, layers)["decoder_alpha"] if variant.residual == "deepnet_alpha" else 1.0
        self.embed_tokens = AdaptiveInput(vocab_size, d_model, cutoffs, factor, pad_idx)
        self.decoder_input = PositionalInput(d_model, dropout, first=pad_idx + 1)
        # fairseq's WikiText-103 architecture has no final decoder norm, also with Pre-LN (no_decoder_final_norm);
        # the newer methods' own LM code keeps theirs (the variant's `lm_final_norm`).
        self.decoder = LayerStack(variant, layers, d_model, ffn_dim, heads, dropout, attention_dropout,
                                  activation_dropout, cross_attention=False, residual_alpha=alpha,
                                  final_norm=variant.final_norm and variant.lm_final_norm)
        self.softmax = AdaptiveSoftmax(self.embed_tokens, softmax_dropout)

    def extra_repr(self) -> str:
        return f"variant={self.variant.name} ({self.variant.title}), {self.decoder_layers}L, d_model={self.d_model}"

    def hidden(self, tokens: torch.Tensor, layer_outputs: list | None = None) -> torch.Tensor:
        x = self.decoder_input(self.embed_tokens(tokens))
        return self.decoder(x, causal=True, layer_outputs=layer_outputs)

    def target_log_probs(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """log p(targets[t] | tokens[:t+1]) per position, (B, T)."""
        return self.softmax.target_log_probs(self.hidden(tokens), targets).view(targets.shape)

    forward = target_log_probs  # so that DistributedDataParallel's forward is the training computation
