"""Beam search against fairseq's rule, on a scoring model written by hand."""

import math

import torch

from repro.data.text import EOS
from repro.eval.generate import beam_search

A, B, X, Y = 4, 5, 6, 7
VOCAB = 8


class TableModel(torch.nn.Module):
    """Next-token log-probabilities looked up from a table keyed by the prefix (BOS excluded)."""

    def __init__(self, table: dict[tuple, dict[int, float]]):
        super().__init__()
        self.table = table

    def encode(self, src, src_lengths=None):
        return torch.zeros(src.size(0), 1, 1), torch.ones(src.size(0), 1, 1, dtype=torch.bool)

    def decode(self, prev, memory, mask, cache=None):
        rows = []
        for seq in prev.tolist():
            probs = self.table.get(tuple(seq[1:]), {EOS: 0.0})
            row = torch.full((VOCAB,), -50.0)
            for tok, lp in probs.items():
                row[tok] = lp
            rows.append(row)
        return torch.stack(rows).unsqueeze(1)  # logits; log_softmax keeps the order and gaps


def _model():
    # beam 2. Step 0: A, B, then EOS ranked third (beam + 1). Step 1: each beam's EOS ranks third and fourth.
    # fairseq finalises neither; the old rule finalised both, filled its `beam` slots and stopped at [A].
    return TableModel({
        (): {A: -0.1, B: -0.5, EOS: -2.0, X: -3.0},
        (A,): {X: -0.05, EOS: -3.0},
        (B,): {Y: -0.05, EOS: -3.0},
        (A, X): {EOS: -0.01},
        (B, Y): {EOS: -0.01},
    })


def test_eos_below_the_top_beam_candidates_is_not_finalised():
    out = beam_search(_model(), torch.zeros(1, 3, dtype=torch.long), beam=2, max_len=torch.tensor([10]),
                      use_cache=False)
    assert out == [[A, X]]


def test_eos_among_top_beam_is_finalised_and_length_penalty_ranks():
    # EOS ranks first at step 0: the empty hypothesis finishes; the longer one wins only by its normalised score.
    model = TableModel({(): {EOS: -0.2, A: -0.3}, (A,): {EOS: -0.01}})
    out = beam_search(model, torch.zeros(1, 3, dtype=torch.long), beam=2, max_len=torch.tensor([10]),
                      use_cache=False)
    lp = torch.log_softmax(torch.tensor([-50.0, -50.0, -0.2, -50.0, -0.3, -50, -50, -50]), 0)
    empty = lp[EOS].item() / 1
    longer = (lp[A].item() + math.log(1.0)) / 2  # (A,) puts ~all mass on EOS
    assert (out == [[A]]) == (longer > empty)


def test_max_length_forces_end():
    model = TableModel({(): {A: -0.01}, (A,): {A: -0.01}, (A, A): {A: -0.01}})
    out = beam_search(model, torch.zeros(1, 3, dtype=torch.long), beam=2, max_len=torch.tensor([2]),
                      use_cache=False)
    assert out == [[A, A]]
