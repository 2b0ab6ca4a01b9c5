"""The faster CPU paths (repro/model/cpu_paths.py) compute what torch's own layers compute."""

import pytest
import torch
import torch.nn.functional as F

from repro.model import cpu_paths
from repro.model.cpu_paths import Dropout, Linear, keep_freed_memory, linear
from repro.model.seq2seq import EncoderDecoder
from repro.model.variants import VARIANTS

@pytest.fixture
def onednn(monkeypatch):
    """The oneDNN products, whichever library this processor's training takes (cpu_paths.USE_ONEDNN)."""
    if not cpu_paths.ONEDNN:
        pytest.skip("this torch build has no oneDNN")
    monkeypatch.setattr(cpu_paths, "USE_ONEDNN", True)


needs_onednn = pytest.mark.usefixtures("onednn")


def took_onednn(y: torch.Tensor) -> bool:
    return type(y.grad_fn).__name__ == "_OneDNNLinearBackward"


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().double() - b.detach().double()).norm() / b.detach().double().norm())


@needs_onednn
@pytest.mark.parametrize("in_features,out_features", [(16, 48), (48, 16), (16, 16)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("layout", ["contiguous", "transposed input", "transposed weight"])
def test_linear_matches_fp64_reference(in_features, out_features, bias, layout):
    torch.manual_seed(0)
    x = torch.randn(3, 7, in_features)
    w = torch.randn(out_features, in_features)
    if layout == "transposed input":
        x = torch.randn(7, 3, in_features).transpose(0, 1)  # a strided view, as attention's outputs are
    if layout == "transposed weight":
        w = torch.randn(in_features, out_features).t()  # as the adaptive softmax's tails use their projections
    b = torch.randn(out_features) if bias else None
    leaves = [t.clone().requires_grad_() for t in (x, w, b) if t is not None]
    refs = [t.detach().double().requires_grad_() for t in leaves]
    y = linear(*leaves, *([None] if not bias else []))
    y_ref = F.linear(*refs, *([None] if not bias else []))
    assert took_onednn(y)
    g = torch.randn_like(y)
    y.backward(g)
    y_ref.backward(g.double())
    assert rel(y, y_ref) < 1e-6
    for t, t_ref in zip(leaves, refs):
        assert rel(t.grad, t_ref.grad) < 1e-6


@needs_onednn
def test_linear_keeps_torch_elsewhere():
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(5, 8, requires_grad=True)
    assert not took_onednn(linear(x.double(), w.double()))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = linear(x, w)
    assert y.dtype == torch.bfloat16 and not took_onednn(y)
    cpu_paths.ENABLED = False
    try:
        assert not took_onednn(linear(x, w))
    finally:
        cpu_paths.ENABLED = True
    layer = Linear(8, 5)
    assert isinstance(layer, torch.nn.Linear) and set(layer.state_dict()) == {"weight", "bias"}


def test_dropout_keeps_the_distribution_and_its_gradient():
    torch.manual_seed(0)
    p = 0.3
    drop = Dropout(p)
    x = torch.full((400, 500), 2.0, requires_grad=True)
    y = drop(x)
    dropped = float((y == 0).float().mean())
    assert abs(dropped - p) < 0.005  # 200,000 draws: the standard error is 0.001
    assert torch.allclose(y[y != 0], torch.tensor(2.0 / (1 - p)))
    y.sum().backward()
    assert torch.equal(x.grad, (y / 2.0).detach())  # the same mask and scale
    drop.eval()
    assert torch.equal(drop(x), x)
    assert torch.equal(Dropout(0.0).train()(x), x)


@needs_onednn
def test_model_step_matches_torch_layers():
    """One forward and backward of a small encoder-decoder through both paths: same loss and gradients."""
    torch.manual_seed(0)
    model = EncoderDecoder(VARIANTS["post_ln"], 40, 1, 32, 64, 4, 2, 2, 0.0).train()
    src, prev, target = torch.randint(2, 40, (6, 9)), torch.randint(2, 40, (6, 8)), torch.randint(2, 40, (48,))
    grads = []
    for enabled in (False, True):
        cpu_paths.ENABLED = enabled
        try:
            model.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(src, prev).flatten(0, 1), target)
            loss.backward()
        finally:
            cpu_paths.ENABLED = True
        grads.append((loss.item(), [p.grad.clone() for p in model.parameters()]))
    (loss_plain, g_plain), (loss_fast, g_fast) = grads
    assert loss_fast == pytest.approx(loss_plain, rel=1e-6)
    assert max(rel(a, b) for a, b in zip(g_fast, g_plain)) < 1e-4


def test_keep_freed_memory_applies_on_glibc():
    import platform
    import sys
    expected = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert keep_freed_memory() is expected


def test_plain_operands():
    m = torch.randn(6, 4)
    assert cpu_paths._plain(m) is m and cpu_paths._plain(m.t()).data_ptr() == m.data_ptr()  # read in place
    column_slice = torch.randn(6, 5)[:, :4]  # as the adaptive softmax's head gradient, a slice of a wider one
    plain = cpu_paths._plain(column_slice)
    assert plain.is_contiguous() and torch.equal(plain, column_slice)


@needs_onednn
def test_linear_gradient_from_a_column_slice():
    """The gradient reaching the linear is a strided slice (its output was concatenated): same results."""
    torch.manual_seed(0)
    x, w = torch.randn(10, 8), torch.randn(6, 8)
    grads = []
    for fn in (linear, F.linear):
        xx, ww = x.clone().requires_grad_(), w.clone().requires_grad_()
        out = torch.cat([fn(xx, ww), xx[:, :2]], dim=-1)
        out.backward(torch.arange(out.numel(), dtype=torch.float32).view_as(out) / out.numel())
        grads.append((xx.grad, ww.grad))
    for a, b in zip(*grads):
        assert rel(a, b) < 1e-6


def reference_attention(q, k, v, allowed, keep, p):
    """Attention in fp64 with the given keep mask: softmax over the allowed keys (zeros where none is), the kept
    probabilities scaled by 1 / (1 - p)."""
    scores = (q.double() @ k.double().transpose(-2, -1)) / q.shape[-1] ** 0.5
    probs = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(0.0)
    return (probs * keep / (1 - p)) @ v.double()


@pytest.mark.parametrize("case", ["causal", "key padding", "a query with no key"])
def test_attention_with_dropout_matches_fp64_reference(case):
    """The CPU path's attention dropout: the softmax over the keys a query may attend, each probability kept where
    its uniform draw is at least p and scaled by 1 / (1 - p); outputs and gradients as an fp64 reference with the
    same draws."""
    torch.manual_seed(0)
    b, h, t, s, p = 3, 2, 5, 5, 0.25
    q, k, v = (torch.randn(b, h, n, 8, requires_grad=True) for n in (t, s, s))
    mask, causal = None, False
    if case == "causal":
        causal, allowed = True, torch.ones(t, s, dtype=torch.bool).tril()
    else:
        mask = torch.ones(b, 1, 1, s, dtype=torch.bool)
        mask[0, ..., 3:] = False  # the first sequence's last two keys are padding
        if case == "a query with no key":
            mask = mask.expand(b, 1, t, s).clone()
            mask[1, 0, 2] = False
        allowed = mask
    torch.manual_seed(7)
    out = cpu_paths.attention(q, k, v, mask, causal, p)
    torch.manual_seed(7)
    keep = torch.rand(b, h, t, s).ge(p)
    assert 0 < int((~keep).sum()) < keep.numel()
    ref = reference_attention(q, k, v, allowed, keep, p)
    assert rel(out, ref) < 1e-6
    weights = torch.randn_like(out)
    grads = torch.autograd.grad((out * weights).sum(), (q, k, v))
    ref_grads = torch.autograd.grad((ref * weights.double()).sum(), (q, k, v))
    assert max(rel(a, r) for a, r in zip(grads, ref_grads)) < 1e-6
    if case == "a query with no key":
        assert torch.equal(out[1, :, 2], torch.zeros(h, 8))


def test_attention_keeps_torch_elsewhere():
    """Without dropout, in fp64 or with the CPU paths off, attention is torch's scaled_dot_product_attention."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 4, 8) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.equal(cpu_paths.attention(q, k, v, None, True, 0.0), expected)
    torch.manual_seed(1)
    through_torch = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), dropout_p=0.5)
    torch.manual_seed(1)
    assert torch.equal(cpu_paths.attention(q.double(), k.double(), v.double(), None, False, 0.5), through_torch)
    cpu_paths.ENABLED = False
    try:
        torch.manual_seed(1)
        plain = cpu_paths.attention(q, k, v, None, False, 0.5)
    finally:
        cpu_paths.ENABLED = True
    torch.manual_seed(1)
    assert torch.equal(plain, F.scaled_dot_product_attention(q, k, v, dropout_p=0.5))
