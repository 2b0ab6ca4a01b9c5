"""Build the model a recipe asks for (the one place in repro/model that reads a recipe)."""

from __future__ import annotations

from torch import nn

from repro.config import Recipe
from repro.model.init import apply_variant_init
from repro.model.lm import LanguageModel
from repro.model.seq2seq import EncoderDecoder
from repro.model.speech import Conv1dSubsampler
from repro.model.variants import get_variant


def build_model(recipe: Recipe, vocab_size: int, pad_idx: int) -> nn.Module:
    m = recipe.model
    variant = get_variant(m.variant)
    if recipe.task == "lm":
        if max(m.adaptive_cutoffs) >= vocab_size:
            raise ValueError(f"model.adaptive_cutoffs {m.adaptive_cutoffs}: every band edge must lie below the "
                             f"prepared corpus's vocabulary of {vocab_size} words")
        model = LanguageModel(variant, vocab_size, pad_idx, m.d_model, m.ffn_dim, m.heads, m.decoder_layers,
                              m.dropout, m.attention_dropout, m.activation_dropout,
                              m.adaptive_cutoffs, m.adaptive_factor, m.adaptive_softmax_dropout)
        embeddings = list(model.embed_tokens.embeddings[:1])
    else:
        front_end = (Conv1dSubsampler(m.input_features, m.conv_channels, m.d_model)
                     if recipe.task == "asr" else None)
        model = EncoderDecoder(variant, vocab_size, pad_idx, m.d_model, m.ffn_dim, m.heads, m.encoder_layers,
                               m.decoder_layers, m.dropout, m.attention_dropout, m.activation_dropout,
                               front_end=front_end)
        embeddings = [model.embed_tokens]
    apply_variant_init(model, embeddings, b2t_depth_scaled=m.b2t_depth_scaled_init)
    return model
