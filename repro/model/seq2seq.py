"""Encoder-decoder Transformer (MT, summarisation, and ASR with a speech front end), incremental decoding."""

from __future__ import annotations

import torch
from torch import nn

from repro.model.embedding import PositionalInput, TokenEmbedding
from repro.model.cpu_paths import linear
from repro.model.stack import LayerStack
from repro.model.variants import Variant, deepnet_constants


class EncoderDecoder(nn.Module):
    """Token ids (or speech features through `front_end`) in, next-token logits out.

    Source/target/output embeddings are one shared matrix for text tasks (share_all_embeddings); with a speech
    front end the decoder's input and output embeddings are tied.
    """

    def __init__(self, variant: Variant, vocab_size: int, pad_idx: int, d_model: int, ffn_dim: int, heads: int,
                 encoder_layers: int, decoder_layers: int, dropout: float, attention_dropout: float = 0.0,
                 activation_dropout: float = 0.0, front_end: nn.Module | None = None):
        super().__init__()
        self.variant, self.pad_idx, self.d_model = variant, pad_idx, d_model
        self.encoder_layers, self.decoder_layers = encoder_layers, decoder_layers
        alphas = deepnet_constants(encoder_layers, decoder_layers) if variant.residual == "deepnet_alpha" else {}
        self.embed_tokens = TokenEmbedding(vocab_size, d_model, pad_idx)
        self.front_end = front_end  # None: the encoder reads the shared token embedding
        self.encoder_input = PositionalInput(d_model, dropout, first=pad_idx + 1)
        self.decoder_input = PositionalInput(d_model, dropout, first=pad_idx + 1)
        common = dict(d_model=d_model, ffn_dim=ffn_dim, heads=heads, dropout=dropout,
                      attention_dropout=attention_dropout, activation_dropout=activation_dropout)
        self.encoder = LayerStack(variant, encoder_layers, cross_attention=False,
                                  residual_alpha=alphas.get("encoder_alpha", 1.0), **common)
        self.decoder = LayerStack(variant, decoder_layers, cross_attention=True,
                                  residual_alpha=alphas.get("decoder_alpha", 1.0), **common)

    def extra_repr(self) -> str:
        return (f"variant={self.variant.name} ({self.variant.title}), "
                f"{self.encoder_layers}L-{self.decoder_layers}L, d_model={self.d_model}")

    # -- encoder -------------------------------------------------------------------------------------------
    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor | None = None,
               layer_outputs: list | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (encoder output (B, S, d), key mask (B, 1, S) with True where a position may be attended)."""
        if self.front_end is None:
            x = self.embed_tokens(src)
            keep = src.ne(self.pad_idx)
        else:
            x, out_lengths = self.front_end(src, src_lengths)
            keep = torch.arange(x.size(1), device=x.device).unsqueeze(0) < out_lengths.unsqueeze(1)
        mask = keep.unsqueeze(1)
        x = self.encoder_input(x, keep=keep)
        out = self.encoder(x, self_mask=mask, layer_outputs=layer_outputs)
        return out, mask

    # -- decoder -------------------------------------------------------------------------------------------
    def decode(self, prev_tokens: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor,
               cache: list[dict] | None = None, layer_outputs: list | None = None, output=linear):
        """Logits (B, T, V): `output`(decoder states, output embedding), the projection unless a loss takes its
        place (repro/train/output_loss.py). With `cache`, prev_tokens holds only the newest token of each
        hypothesis."""
        offset = 0
        if cache is not None:
            offset = cache[0].get("steps", 0)
            for c in cache:
                c["steps"] = offset + prev_tokens.size(1)
        x = self.decoder_input(self.embed_tokens(prev_tokens), offset=offset, keep=prev_tokens.ne(self.pad_idx))
        x = self.decoder(x, causal=cache is None, memory=memory, memory_mask=memory_mask, cache=cache,
                         layer_outputs=layer_outputs)
        return output(x, self.embed_tokens.weight)

    def forward(self, src: torch.Tensor, prev_tokens: torch.Tensor, src_lengths: torch.Tensor | None = None,
                output=linear):
        memory, mask = self.encode(src, src_lengths)
        return self.decode(prev_tokens, memory, mask, output=output)

    def new_cache(self) -> list[dict]:
        return [{} for _ in range(self.decoder_layers)]

    @staticmethod
    def reorder_cache(cache: list[dict], order: torch.Tensor) -> None:
        """Beam search: keep the cache rows of the hypotheses that survive (in place)."""
        for layer in cache:
            for part in ("self", "cross"):
                if part in layer:
                    for key in ("k", "v"):
                        layer[part][key] = layer[part][key].index_select(0, order)
