"""lnrepro against the reference implementations, run: the same weights and batch give the same numbers.

The fixtures (tests/fixtures/reference/, written by its make_fixtures.py in the references' own environment) hold a
small random model's parameters under the reference's names, a batch, and the reference's logits, label-smoothed
loss, gradients and beam search. Here the parameters are mapped onto lnrepro's model (repro/model/fairseq_weights.py)
and lnrepro computes the same things.
"""

from pathlib import Path

import pytest
import torch

from repro.config import resolve
from repro.data.text import PAD
from repro.eval.generate import beam_search
from repro.model.build import build_model
from repro.model.fairseq_weights import from_fairseq
from repro.train.optim import label_smoothed_nll

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests/fixtures/reference"
SMALL = ["model.encoder_layers=2", "model.decoder_layers=2", "model.d_model=16", "model.ffn_dim=32", "model.heads=2",
         "model.dropout=0.0", "model.attention_dropout=0.0", "model.activation_dropout=0.0"]
FAIRSEQ = [("fairseq_post_ln", "post_ln"), ("fairseq_pre_ln", "pre_ln")]


def loaded(name: str, variant: str):
    fx = torch.load(FIXTURES / f"{name}.pt", weights_only=True)
    model = build_model(resolve(REPO / f"recipes/6L-6L-{variant}.yaml", "tiny", SMALL).recipe, 50, PAD)
    model.load_state_dict(from_fairseq(fx["weights"], variant))  # strict: every parameter mapped, none left over
    return fx, model


@pytest.mark.parametrize("name,variant", FAIRSEQ)
def test_fairseq_weights_give_fairseqs_logits_loss_and_gradients(name, variant):
    fx, model = loaded(name, variant)
    b = fx["batch"]
    model.train()
    logits = model(b["src"], b["prev"])
    # at padding the two differ and nothing reads them: fairseq gives a pad token the zero position
    used = b["target"].ne(PAD)
    assert (logits - fx["logits"])[used].abs().max() < 1e-5, fx["reference"]
    loss, nll = label_smoothed_nll(logits, b["target"], 0.1, PAD)
    assert loss.item() == pytest.approx(fx["loss"].item(), rel=1e-6)
    assert nll.item() == pytest.approx(fx["nll"].item(), rel=1e-6)
    loss.backward()
    reference = from_fairseq(fx["grads"], variant)
    for n, p in model.named_parameters():
        assert (p.grad - reference[n]).abs().max() < 1e-5, n


@pytest.mark.parametrize("name,variant", FAIRSEQ)
@pytest.mark.parametrize("lenpen", [0.6, 1.0])
def test_fairseq_weights_give_fairseqs_beam_search(name, variant, lenpen):
    """Beam 4: the best hypothesis of fairseq's SequenceGenerator, its tokens and its length-normalised score."""
    fx, model = loaded(name, variant)
    b, spec = fx["batch"], fx["beam"]
    best = beam_search(model, b["src"], spec["beam_size"], torch.full((3,), spec["max_len_b"]), lenpen,
                       with_scores=True)
    for (score, tokens), hyps in zip(best, spec["hypotheses"][str(lenpen)]):
        assert tokens + [2] == hyps[0]["tokens"]
        assert score == pytest.approx(hyps[0]["score"], abs=1e-5)


def test_torchscale_deepnet_weights_give_its_logits_loss_and_gradients():
    """DeepNet against torchscale's DeepNorm layers (x * alpha + F(x), then LN; alpha from the depths)."""
    from repro.model.fairseq_weights import from_torchscale
    from repro.model.variants import deepnet_constants
    fx = torch.load(FIXTURES / "torchscale_deepnet.pt", weights_only=True)
    constants = deepnet_constants(2, 2)
    assert constants["encoder_alpha"] == pytest.approx(fx["alphas"]["encoder"], rel=1e-12)
    assert constants["decoder_alpha"] == pytest.approx(fx["alphas"]["decoder"], rel=1e-12)
    model = build_model(resolve(REPO / "recipes/18L-18L-deepnet.yaml", "tiny", SMALL).recipe, 50, PAD)
    missing, unexpected = model.load_state_dict(from_torchscale(fx["weights"]), strict=False)
    # every parameter mapped; what is left are the alpha buffers lnrepro computes from the depths (checked above)
    assert not unexpected and missing and all(k.endswith("_residual.alpha") for k in missing)
    model.train()
    b = fx["batch"]
    logits = model(b["src"], b["prev"])
    used = b["target"].ne(PAD)
    assert (logits - fx["logits"])[used].abs().max() < 1e-4, fx["reference"]
    loss, nll = label_smoothed_nll(logits, b["target"], 0.1, PAD)
    assert loss.item() == pytest.approx(fx["loss"].item(), rel=1e-6)
    loss.backward()
    reference = from_torchscale(fx["grads"])
    for n, p in model.named_parameters():
        assert (p.grad - reference[n]).abs().max() < 1e-4, n


# -- the methods' official code on fairseq (make_fixtures.py --resi-dual PATH --b2t PATH) -------------------------

OFFICIAL = [("resi_dual", "residual"), ("b2t_fork", "b2t"), ("b2t_noln_fork", "b2t_noln")]


def fairseq09_label_smoothed(logits: torch.Tensor, target: torch.Tensor, eps: float) -> torch.Tensor:
    """The authors' fork's criterion (fairseq 0.9): (1 - eps) NLL + eps/V times the sum of -log p over the
    vocabulary. lnrepro trains with fairseq 0.12's form, eps/(V-1) over the other words (docs/fidelity.md)."""
    lprobs = torch.log_softmax(logits.float(), dim=-1)
    used = target.ne(PAD)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)[used].sum()
    smooth = -lprobs.sum(-1)[used].sum()
    return (1 - eps) * nll + eps / lprobs.size(-1) * smooth


def official(name: str, variant: str):
    fx = torch.load(FIXTURES / f"{name}.pt", weights_only=True)
    model = build_model(resolve(REPO / f"recipes/6L-6L-{variant}.yaml", "tiny", SMALL).recipe, 50, PAD)
    missing, unexpected = model.load_state_dict(from_fairseq(fx["weights"], variant), strict=False)
    # every parameter mapped; left are B2T w/o LN's constants, computed from the depth (compared below)
    assert not unexpected and all(k.endswith(("b2t_alpha", "b2t_beta")) for k in missing), (missing, unexpected)
    return fx, model


@pytest.mark.parametrize("name,variant", OFFICIAL)
def test_official_code_on_fairseq_gives_the_same_logits_loss_and_gradients(name, variant):
    """ResiDual (its fairseq 0.12 plugin), B2T and B2T w/o LN (the authors' fairseq 0.9 fork) on shared weights.
    Gradients are of the reference's own loss; they run to ~25 here, so their tolerance is relative."""
    fx, model = official(name, variant)
    b = fx["batch"]
    model.train()
    logits = model(b["src"], b["prev"])
    used = b["target"].ne(PAD)
    assert (logits - fx["logits"])[used].abs().max() < 1e-5, fx["reference"]
    if fx["fairseq"].startswith("0.9"):
        loss = fairseq09_label_smoothed(logits, b["target"], 0.1)
    else:
        loss, _ = label_smoothed_nll(logits, b["target"], 0.1, PAD)
    assert loss.item() == pytest.approx(fx["loss"].item(), rel=1e-6)
    loss.backward()
    reference = from_fairseq(fx["grads"], variant)
    for n, p in model.named_parameters():
        assert (p.grad - reference[n]).abs().max() < 1e-5 * max(1.0, reference[n].abs().max().item()), n


def test_b2t_without_ln_has_the_forks_constants():
    """Appendix D's alpha = min(N/12, N^-0.15) and beta = d^-0.2, as the fork's layers hold them (scale4residual,
    scale4output)."""
    fx, model = official("b2t_noln_fork", "b2t_noln")
    for side in ("encoder", "decoder"):
        layer = getattr(model, side).layers[0]
        assert layer.b2t_alpha.item() == pytest.approx(fx["scales"][side]["residual"], rel=1e-6)
        assert layer.b2t_beta.item() == pytest.approx(fx["scales"][side]["output"], rel=1e-6)


def test_residual_dual_stream_norm_has_the_official_eps():
    fx, model = official("resi_dual", "residual")
    assert model.encoder.final_norm.eps == model.decoder.final_norm.eps == fx["final_norm_eps"] == 1e-7


def _spread_ratios(variant: str, fx: dict) -> dict[str, tuple[float, float]]:
    """lnrepro's initial weights against the fork's, tensor by tensor: the ratio of their spreads (1 where both
    are constant and equal; inf where only one is), and each ratio's band: 15% for a tensor of 1,000 values or more,
    and for a bias of 32-128 values, whose spread is measured within ~8%, a band four times that wide."""
    sizes = [f"model.encoder_layers={fx['layers']}", f"model.decoder_layers={fx['layers']}",
             f"model.d_model={fx['d_model']}", f"model.ffn_dim={fx['ffn_dim']}", f"model.heads={fx['heads']}"]
    torch.manual_seed(0)
    ours = build_model(resolve(REPO / f"recipes/6L-6L-{variant}.yaml", "tiny", sizes).recipe, 50, PAD).state_dict()
    out = {}
    for name, ref in from_fairseq(fx["weights"], variant).items():
        mine = ours[name]
        if name == "embed_tokens.weight":
            ref, mine = ref[PAD + 1:], mine[PAD + 1:]  # the padding row is zero in both
        band = 0.15 if ref.numel() >= 1000 else 0.35
        if ref.numel() == 1 or ref.std() == 0:
            out[name] = (1.0 if torch.equal(ref, mine) else float("inf"), band)
        else:
            out[name] = ((mine.std() / ref.std()).item(), band)
    return out


def test_b2t_2023_initialisation_matches_the_forks():
    """The fork at c8e2ad4 rescales every weight of a B2T layer by N^-0.5 (rescaling_init, commit 4d80167):
    lnrepro's b2t_2023 has the same spread in every tensor (4+4 layers, d 32: a spread is measured within a few
    per cent). The 2022 paper's B2T, not rescaled, is twice as wide in the layers and is told apart."""
    fx = torch.load(FIXTURES / "b2t_fork_init.pt", weights_only=True)
    ratios = _spread_ratios("b2t_2023", fx)
    off = {n: r for n, (r, band) in ratios.items() if not 1 - band < r < 1 + band}
    assert not off, off
    paper = _spread_ratios("b2t", fx)
    widened = [r for n, (r, _) in paper.items() if ".layers." in n and n.endswith("weight") and "norm" not in n]
    assert widened and all(1.7 < r < 2.3 for r in widened), widened


CHECKPOINTS = FIXTURES / "fairseq_checkpoint"


@pytest.mark.parametrize("checkpoint", ["checkpoint_best.pt", "checkpoint_cfg.pt"])
def test_a_fairseq_checkpoint_translates_to_fairseqs_hypotheses(checkpoint, tmp_path):
    """A Pre-LN checkpoint written by fairseq (its arguments as fairseq 0.9 keeps them, and as 0.10-0.12 keep them,
    an omegaconf `cfg`, read here without omegaconf), scored by `lnrepro score-fairseq`: the hypotheses of fairseq's
    SequenceGenerator with generate.py's length limit (one of them runs to it, 200 tokens)."""
    import json

    from typer.testing import CliRunner

    from repro.cli import app
    generated = json.loads((CHECKPOINTS / "generated.json").read_text())
    source = tmp_path / "source.txt"
    source.write_text("".join(line + "\n" for line in generated["sources"]))
    out = tmp_path / "hyps.txt"
    r = CliRunner().invoke(app, ["score-fairseq", str(CHECKPOINTS / checkpoint), "--dict",
                                 str(CHECKPOINTS / generated["dictionary"]), "--source", str(source), "--tokenizer",
                                 "none", "--beam", str(generated["beam"]), "--lenpen", str(generated["lenpen"]),
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "read as pre_ln" in r.output
    assert out.read_text().splitlines() == generated["hypotheses"]
    assert max(len(h.split()) for h in generated["hypotheses"]) == 200


def test_the_authors_text_pipeline_round_trips(tmp_path):
    """Moses tokenisation and subword-nmt BPE on the source; BPE removal and Moses detokenisation undo them."""
    import io

    from subword_nmt.learn_bpe import learn_bpe

    from repro.eval.fairseq_import import TextPipeline
    text = "The state-of-the-art model, trained for 3.5 days, wasn't bad.\nModels train; states change.\n" * 20
    tokenized = "\n".join(TextPipeline("en", "en", "moses").encode(l) for l in text.splitlines())
    codes = tmp_path / "codes"
    with open(codes, "w", encoding="utf-8") as f:  # learned on tokenised text, as the WMT data were
        learn_bpe(io.StringIO(tokenized), f, 40)
    p = TextPipeline("en", "en", "moses", codes)
    line = "The state-of-the-art model, trained for 3.5 days, wasn't bad."
    encoded = p.encode(line)
    assert "@-@" in encoded and "@@ " in encoded  # Moses's aggressive dash split, then BPE pieces
    assert p.decode(encoded) == line


def test_a_file_that_is_no_checkpoint_is_one_line_of_error(tmp_path):
    from typer.testing import CliRunner

    from repro.cli import app
    bad = tmp_path / "model.pt"
    bad.write_text("not a checkpoint")
    source = tmp_path / "s.txt"
    source.write_text("a b\n")
    r = CliRunner().invoke(app, ["score-fairseq", str(bad), "--dict", str(CHECKPOINTS / "dict.en.txt"), "--source",
                                 str(source)])
    assert r.exit_code == 2 and f"{bad}: not a readable checkpoint" in r.output and len(r.output.splitlines()) == 1


def _copy_torch_layer(layer, state: dict, cross: bool) -> None:
    """A torch-named layer's attention and FFN weights (nn.MultiheadAttention's fused in_proj, linear1, linear2) into
    lnrepro's layer: the official ReZero and DyT layers are built of torch's modules."""
    d = state["linear1.weight"].shape[1]
    sub = lambda prefix: {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    with torch.no_grad():
        layer.self_attn.qkv_proj.weight.copy_(state["self_attn.in_proj_weight"])
        layer.self_attn.qkv_proj.bias.copy_(state["self_attn.in_proj_bias"])
        layer.self_attn.out_proj.load_state_dict(sub("self_attn.out_proj."))
        if cross:
            w, b = state["multihead_attn.in_proj_weight"], state["multihead_attn.in_proj_bias"]
            layer.cross_attn.q_proj.weight.copy_(w[:d])
            layer.cross_attn.q_proj.bias.copy_(b[:d])
            layer.cross_attn.kv_proj.weight.copy_(w[d:])
            layer.cross_attn.kv_proj.bias.copy_(b[d:])
            layer.cross_attn.out_proj.load_state_dict(sub("multihead_attn.out_proj."))
        layer.ffn.fc1.load_state_dict(sub("linear1."))
        layer.ffn.fc2.load_state_dict(sub("linear2."))


def _rezero_layer(state: dict, cross: bool):
    """lnrepro's ReZero layer holding the official layer's weights (rztx.py names)."""
    from repro.model.block import TransformerLayer
    from repro.model.variants import VARIANTS
    layer = TransformerLayer(VARIANTS["rezero"], state["linear1.weight"].shape[1], state["linear1.weight"].shape[0], 2,
                             0.0, 0.0, 0.0, cross_attention=cross).eval()
    _copy_torch_layer(layer, state, cross)
    with torch.no_grad():
        layer.attn_residual.alpha.copy_(state["resweight"][0])
    return layer


def test_rezero_layers_equal_the_official_code():
    """majumderb/rezero rztx.py run on the same weights (tests/fixtures/reference/make_official.py): outputs and
    every parameter's gradient, encoder and decoder layer; one gate per layer, whose gradient sums its sublayers'."""
    fx = torch.load(FIXTURES / "rezero_rztx.pt", weights_only=True)
    enc, dec = _rezero_layer(fx["encoder"], False), _rezero_layer(fx["decoder"], True)
    src, tgt = fx["src"].transpose(0, 1), fx["tgt"].transpose(0, 1)  # theirs time-first, ours batch-first
    enc_out = enc(src)
    dec_out = dec(tgt, causal=True, memory=enc_out.detach())
    assert torch.allclose(enc_out.transpose(0, 1), fx["encoder_out"], atol=1e-5)
    assert torch.allclose(dec_out.transpose(0, 1), fx["decoder_out"], atol=1e-5)
    we, wd = fx["loss_weights"]
    ((enc_out.transpose(0, 1) * we).sum() + (dec_out.transpose(0, 1) * wd).sum()).backward()
    for layer, grads in ((enc, fx["encoder_grads"]), (dec, fx["decoder_grads"])):
        assert torch.allclose(layer.attn_residual.alpha.grad, grads["resweight"][0], atol=1e-4)
        assert torch.allclose(layer.self_attn.qkv_proj.weight.grad, grads["self_attn.in_proj_weight"], atol=1e-5)
        assert torch.allclose(layer.ffn.fc1.weight.grad, grads["linear1.weight"], atol=1e-5)
        assert torch.allclose(layer.ffn.fc2.bias.grad, grads["linear2.bias"], atol=1e-5)
    d = enc.self_attn.q_proj.weight.shape[0] if hasattr(enc.self_attn, "q_proj") else 16
    assert torch.allclose(dec.cross_attn.kv_proj.weight.grad, fx["decoder_grads"]["multihead_attn.in_proj_weight"][d:],
                          atol=1e-5)
    assert sum(n.endswith("residual.alpha") for n, _ in dec.named_parameters()) == 1


def test_dyt_pre_ln_layers_equal_the_official_conversion():
    """jiachenzhu/DyT's convert_ln_to_dyt on torch's Pre-LN layers (tests/fixtures/reference/make_official.py),
    against lnrepro's dyt_pre layers on the same weights: outputs and gradients, DyT's alpha, gamma and beta too."""
    from repro.model.block import TransformerLayer
    from repro.model.variants import VARIANTS
    fx = torch.load(FIXTURES / "dyt_convert.pt", weights_only=True)

    def ours(state, cross):
        d = state["linear1.weight"].shape[1]
        layer = TransformerLayer(VARIANTS["dyt_pre"], d, state["linear1.weight"].shape[0], 2, 0.0, 0.0, 0.0,
                                 cross_attention=cross).eval()
        slots = {"norm1": "pre_attn_norm", "norm2": "pre_cross_norm" if cross else "pre_ffn_norm",
                 "norm3": "pre_ffn_norm"}
        _copy_torch_layer(layer, state, cross)
        with torch.no_grad():
            for theirs, slot in slots.items():
                if f"{theirs}.alpha" in state:
                    norm = getattr(layer, slot)
                    norm.alpha.copy_(state[f"{theirs}.alpha"][0])
                    norm.weight.copy_(state[f"{theirs}.weight"])
                    norm.bias.copy_(state[f"{theirs}.bias"])
        return layer, slots

    (enc, enc_slots), (dec, dec_slots) = ours(fx["encoder"], False), ours(fx["decoder"], True)
    enc_out = enc(fx["src"])
    dec_out = dec(fx["tgt"], causal=True, memory=enc_out.detach())
    assert torch.allclose(enc_out, fx["encoder_out"], atol=1e-5)
    assert torch.allclose(dec_out, fx["decoder_out"], atol=1e-5)
    we, wd = fx["loss_weights"]
    ((enc_out * we).sum() + (dec_out * wd).sum()).backward()
    for layer, grads, slots in ((enc, fx["encoder_grads"], enc_slots), (dec, fx["decoder_grads"], dec_slots)):
        assert torch.allclose(layer.self_attn.qkv_proj.weight.grad, grads["self_attn.in_proj_weight"], atol=1e-5)
        assert torch.allclose(layer.ffn.fc2.weight.grad, grads["linear2.weight"], atol=1e-5)
        norm = getattr(layer, slots["norm1"])
        assert torch.allclose(norm.alpha.grad, grads["norm1.alpha"][0], atol=1e-4)
        assert torch.allclose(norm.weight.grad, grads["norm1.weight"], atol=1e-5)


def test_score_fairseq_names_a_missing_file_before_any_download(tmp_path):
    from typer.testing import CliRunner

    from repro.cli import app
    r = CliRunner().invoke(app, ["score-fairseq", str(tmp_path / "none.pt"), "--dict", str(CHECKPOINTS / "dict.en.txt"),
                                 "--test-set", "wmt14/full"])
    assert r.exit_code == 2 and "none.pt: no such file" in r.output and len(r.output.strip().splitlines()) == 1
    r = CliRunner().invoke(app, ["score-fairseq", str(CHECKPOINTS / "checkpoint_best.pt"), "--dict",
                                 str(CHECKPOINTS / "dict.en.txt"), "--source", str(CHECKPOINTS / "dict.en.txt"),
                                 "--out", str(tmp_path)])
    assert r.exit_code == 2 and "a folder" in r.output
