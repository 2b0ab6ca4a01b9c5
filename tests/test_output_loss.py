"""The output projection and the loss in chunks (repro/train/output_loss.py) compute what the plain path computes,
and training through the CPU's fast paths follows training through torch's own layers."""

import json
from pathlib import Path

import pytest
import torch

from repro.config import resolve
from repro.model import cpu_paths
from repro.train import output_loss
from repro.train.loop import train_run
from repro.train.optim import label_smoothed_nll

REPO = Path(__file__).resolve().parents[1]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("use_onednn", [False, True])
def test_chunks_give_the_loss_and_gradients_of_the_plain_path(monkeypatch, use_onednn):
    """Several chunks and a short last one, pad targets, the output matrix also used as an embedding (tied), a
    loss scaled before its backward: loss and nll to 1e-6, gradients to 1e-5 (relative)."""
    if use_onednn and not cpu_paths.ONEDNN:
        pytest.skip("this torch build has no oneDNN")
    monkeypatch.setattr(cpu_paths, "USE_ONEDNN", use_onednn)
    monkeypatch.setattr(output_loss, "CHUNK", 16)
    torch.manual_seed(0)
    h0, w0 = torch.randn(3, 23, 12), torch.randn(50, 12) * 0.3
    tokens, target = torch.randint(0, 50, (5,)), torch.randint(2, 50, (3, 23))
    target[0, -4:] = 1  # pad
    results = []
    for fused in (True, False):
        h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
        if fused:
            assert output_loss.fused(h)
            loss, nll = output_loss.projected_smoothed_nll(h, w, target, 0.1, 1)
            assert not nll.requires_grad
        else:
            loss, nll = label_smoothed_nll(torch.nn.functional.linear(h, w), target, 0.1, 1)
        (0.25 * loss + w[tokens].sum()).backward()
        results.append((loss.detach(), nll.detach(), h.grad, w.grad))
    (loss, nll, gh, gw), (loss0, nll0, gh0, gw0) = results
    assert float(loss) == pytest.approx(float(loss0), rel=1e-6) and float(nll) == pytest.approx(float(nll0), rel=1e-6)
    assert rel(gh, gh0) < 1e-5 and rel(gw, gw0) < 1e-5
    with torch.no_grad():  # validation: the same sums, no gradients computed
        again = output_loss.projected_smoothed_nll(h0, w0.requires_grad_(), target, 0.1, 1)
    assert [float(x) for x in again] == [float(loss), float(nll)] and again[0].grad_fn is None


def test_the_plain_path_stays_where_the_chunks_do_not_apply():
    h = torch.randn(2, 3, 4)
    assert not output_loss.fused(h.double())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not output_loss.fused(h)
    cpu_paths.ENABLED = False
    try:
        assert not output_loss.fused(h)
    finally:
        cpu_paths.ENABLED = True


def log_rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


def test_training_through_the_fast_paths_follows_torchs_own_layers(tiny_root, tmp_path):
    """Ten updates of the same run (dropout off) through the CPU's fast paths (products, chunked loss, fused Adam)
    and through torch's own layers and Adam: training losses, NLLs and gradient norms agree to 1e-4 and the
    validation NLL to 1e-4, relative. Both sum in fp32 in different orders; the differences grow with the updates."""
    sets = ["model.encoder_layers=2", "model.decoder_layers=2", "train.log_interval=1", "optim.max_updates=10",
            "train.validate_interval=10", "model.dropout=0.0", "model.attention_dropout=0.0",
            "model.activation_dropout=0.0"]
    r = resolve(REPO / "recipes/6L-6L-post_ln.yaml", "tiny", sets)
    train_run(r, tmp_path / "fast", tiny_root)
    cpu_paths.ENABLED = False
    try:
        train_run(r, tmp_path / "plain", tiny_root)
    finally:
        cpu_paths.ENABLED = True
    fast, plain = log_rows(tmp_path / "fast"), log_rows(tmp_path / "plain")
    assert [row["step"] for row in fast] == [row["step"] for row in plain] and len(fast) == 11
    for a, b in zip(fast, plain):
        for key in ("loss", "nll", "grad_norm", "valid_nll"):
            if key in b:
                assert a[key] == pytest.approx(b[key], rel=1e-4), (a["step"], key)
