"""Adaptive input/softmax, sliding-window perplexity, and a tiny LM run end to end."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from repro.cli import app
from repro.data.wikitext import build_vocab, prepare_wikitext103
from repro.eval.lm_eval import score_stream
from repro.model.adaptive import AdaptiveInput, AdaptiveSoftmax
from repro.model.lm import LanguageModel
from repro.model.variants import VARIANTS

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()


def test_adaptive_softmax_is_normalised_and_matches_gather():
    torch.manual_seed(0)
    inp = AdaptiveInput(100, 16, [20, 60], 2.0, pad_idx=1)
    sm = AdaptiveSoftmax(inp, dropout=0.0)
    x = torch.randn(3, 5, 16)
    lp = sm.log_probs(x)
    assert lp.shape == (3, 5, 100)
    assert torch.allclose(lp.exp().sum(-1), torch.ones(3, 5), atol=1e-5)
    target = torch.randint(0, 100, (3, 5))
    assert torch.allclose(sm.target_log_probs(x, target).view(3, 5), lp.gather(-1, target.unsqueeze(-1)).squeeze(-1),
                          atol=1e-5)
    assert [e.embedding_dim for e in inp.embeddings] == [16, 8, 4]


def test_single_cluster_equals_full_softmax_and_plain_embedding():
    torch.manual_seed(0)
    inp = AdaptiveInput(50, 16, [], 4.0, pad_idx=1)
    sm = AdaptiveSoftmax(inp, dropout=0.0)
    with torch.no_grad():
        inp.projections[0].weight.copy_(torch.eye(16))  # one band of full width: projection is the identity
    tokens = torch.randint(0, 50, (2, 7))
    assert torch.equal(inp(tokens), F.embedding(tokens, inp.embeddings[0].weight))
    x = torch.randn(2, 7, 16)
    full = F.log_softmax(x @ inp.embeddings[0].weight.t(), dim=-1)
    assert torch.allclose(sm.log_probs(x), full, atol=1e-5)


def test_head_uses_band0_embedding_directly_even_with_a_projection():
    torch.manual_seed(0)
    inp = AdaptiveInput(50, 16, [], 4.0, pad_idx=1)  # band 0's input projection is a random d x d matrix
    sm = AdaptiveSoftmax(inp, dropout=0.0)
    x = torch.randn(2, 7, 16)
    assert torch.allclose(sm.log_probs(x), F.log_softmax(x @ inp.embeddings[0].weight.t(), dim=-1), atol=1e-5)


def test_softmax_dropout_hits_the_input_in_training_only():
    torch.manual_seed(0)
    inp = AdaptiveInput(50, 16, [20], 2.0, pad_idx=1)
    sm = AdaptiveSoftmax(inp, dropout=0.5).train()
    x, target = torch.randn(4, 16), torch.randint(0, 20, (4,))  # head-only targets: only input dropout acts
    a, b = sm.target_log_probs(x, target), sm.target_log_probs(x, target)
    assert not torch.allclose(a, b)
    sm.eval()
    assert torch.allclose(sm.target_log_probs(x, target), sm.target_log_probs(x, target))
    assert LanguageModel(VARIANTS["b2t"], 30, 1, 16, 32, 2, 1, 0.3, 0.1, 0.1, [8, 20], 2.0).softmax.dropout.p == 0.2


def tiny_lm(vocab=30, layers=2):
    torch.manual_seed(0)
    return LanguageModel(VARIANTS["b2t"], vocab, 1, 16, 32, 2, layers, 0.0, 0.0, 0.0, [8, 20], 2.0).eval()


def test_lm_trains_under_bf16_autocast():
    """train.precision bf16/fp16: the adaptive input's bands come back in the autocast dtype and must still fill
    the weights-dtype sum (a paper-scale LM step on a GPU failed here)."""
    torch.manual_seed(0)
    model = LanguageModel(VARIANTS["post_ln"], 100, 1, 16, 32, 2, 2, 0.1, 0.0, 0.0, [20, 60], 2.0).train()
    tokens = torch.tensor([[4, 30, 70, 99, 5, 25]])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lp = model(tokens, tokens.roll(-1, 1))
    (-lp.sum()).backward()
    assert torch.isfinite(lp).all() and lp.shape == tokens.shape
    assert all(e.weight.grad is not None for e in model.embed_tokens.embeddings)


def test_sliding_window_scores_every_token_once_and_equals_plain_perplexity():
    model = tiny_lm()
    tokens = np.random.default_rng(0).integers(2, 30, size=53)
    total, n, counts = score_stream(model, tokens, block=12, context=8, device="cpu")
    assert n == 53 and (counts == 1).all()
    # A window covering the whole stream: one pass, which is plain perplexity.
    whole, _, counts = score_stream(model, tokens, block=200, context=100, device="cpu")
    inp = torch.as_tensor(np.concatenate([[2], tokens[:-1]])).unsqueeze(0)
    plain = -model.target_log_probs(inp, torch.as_tensor(tokens).unsqueeze(0)).double().sum().item()
    assert (counts == 1).all() and whole == pytest.approx(plain, rel=1e-6)
    # More context never needs to change which tokens are scored
    total2, _, counts2 = score_stream(model, tokens, block=12, context=4, device="cpu")
    assert (counts2 == 1).all()


def test_vocab_order_and_prepare_mini_from_shared(tmp_path):
    assert build_vocab(["b a b", "c b a"])[:7] == ["<s>", "<pad>", "</s>", "<unk>", "b", "a", "c"]
    src = tmp_path / "src"
    src.mkdir()
    (src / "wiki.valid.tokens").write_text(" = A = \n\n the cat sat \n" * 10)
    (src / "wiki.test.tokens").write_text(" the dog sat \n")
    meta = prepare_wikitext103(tmp_path / "data", src)
    assert meta["corpus"] == "wikitext103_mini" and meta["splits"] == ["test", "train", "valid"]


def test_tiny_lm_end_to_end(tiny_lm_root, tmp_path):
    results, run = tmp_path / "results", tmp_path / "run"
    common = ["--root", str(tiny_lm_root), "--results", str(results)]
    r = runner.invoke(app, ["train", str(REPO / "recipes/wikitext103/6L-b2t.yaml"), "--scale", "tiny",
                            "--run-dir", str(run), *common])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["evaluate", str(run), *common])
    assert r.exit_code == 0, r.output
    m = json.loads((run / "metrics.json").read_text())
    assert 1 < m["splits"]["test"]["perplexity"] < 1000 and "valid" in m["splits"]
    csv = runner.invoke(app, ["table", "3", "--scale", "tiny", "--format", "csv", "--results", str(results)]).output
    assert any(l.startswith("3,6L,b2t,Test,21.47,") and l.endswith(",tiny,ok,1,0") for l in csv.splitlines())
