"""Word-level perplexity with a sliding context window (fairseq eval_lm --context-window).

The stream is scored in steps of (block - context) new tokens; each step feeds up to `context` earlier tokens
first, so every token is scored exactly once, with up to `context` tokens of context.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from repro.data.text import EOS
from repro.data.wikitext import stream


@torch.no_grad()
def score_stream(model, tokens: np.ndarray, block: int, context: int, device) -> tuple[float, int, np.ndarray]:
    """(total NLL, tokens scored, how often each position was scored)."""
    if context >= block:
        raise ValueError(f"eval.context_window {context} must be smaller than the block of {block} tokens")
    model.eval()
    inputs = np.concatenate([[EOS], tokens[:-1]])
    n, stride = len(tokens), block - context
    counts = np.zeros(n, dtype=np.int64)
    total = 0.0
    for start in range(0, n, stride):
        end = min(start + stride, n)
        left = max(0, start - context)
        inp = torch.as_tensor(inputs[left:end], device=device).unsqueeze(0)
        tgt = torch.as_tensor(tokens[left:end], device=device).unsqueeze(0)
        lp = model.target_log_probs(inp, tgt)[0, start - left:]
        total -= float(lp.double().sum())
        counts[start:end] += 1
    return total, n, counts


def sliding_window_perplexity(model, corpus_dir: Path, split: str, block: int, context: int, device) -> float:
    tokens = stream(corpus_dir, split)
    if len(tokens) == 0:
        raise ValueError(f"{corpus_dir}/{split}: the split is empty (no token to score)")
    total, n, _ = score_stream(model, tokens, block, context, device)
    return math.exp(total / max(n, 1))
