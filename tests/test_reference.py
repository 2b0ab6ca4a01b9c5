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

OFFICIAL = [*FAIRSEQ, ("resi_dual", "residual"), ("b2t_fork", "b2t"), ("b2t_noln_fork", "b2t_noln"),
            ("admin_fork", "admin"), ("dlcl_fork", "dlcl"), ("t_fixup_fork", "t_fixup")]


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
    # every parameter mapped; left are constants computed from the depth: B2T w/o LN's (compared below) and DLCL's
    # lower-triangular mask
    assert not unexpected and all(k.endswith(("b2t_alpha", "b2t_beta", "dlcl.tril")) for k in missing), (
        missing, unexpected)
    return fx, model


@pytest.mark.parametrize("name,variant", OFFICIAL)
def test_official_code_on_fairseq_gives_the_same_logits_loss_and_gradients(name, variant):
    """Post-LN and Pre-LN (fairseq 0.12.2), ResiDual (its fairseq 0.12 plugin), B2T and B2T w/o LN (the authors'
    fairseq 0.9 fork), Admin (its fairseq 0.8 fork, the omegas its profiling pass set), DLCL (its fairseq 0.5 fork,
    run with torch 1.4) and T-Fixup (its fairseq 0.9 fork, no LN) on shared weights: logits where a target is read
    (at padding fairseq gives a pad token the zero position), the reference's own label-smoothed loss, and every
    gradient of it (they run to ~25 here, so their tolerance is relative to the tensor's largest)."""
    fx, model = official(name, variant)
    b = fx["batch"]
    model.train()
    logits = model(b["src"], b["prev"])
    used = b["target"].ne(PAD)
    assert (logits - fx["logits"])[used].abs().max() < 1e-5, fx["reference"]
    if not fx.get("fairseq", "0.12.2").startswith("0.12"):  # fairseq_*_ln.pt: fairseq 0.12.2, in their "reference"
        loss = fairseq09_label_smoothed(logits, b["target"], 0.1)
    else:
        loss, _ = label_smoothed_nll(logits, b["target"], 0.1, PAD)
    assert loss.item() == pytest.approx(fx["loss"].item(), rel=1e-6)
    loss.backward()
    reference = from_fairseq(fx["grads"], variant)
    for n, p in model.named_parameters():
        assert (p.grad - reference[n]).abs().max() < 1e-5 * max(1.0, reference[n].abs().max().item()), n


LMS = [("fairseq_lm_post_ln", "post_ln"), ("fairseq_lm_pre_ln", "pre_ln"), ("b2t_fork_lm", "b2t")]


@pytest.mark.parametrize("name,variant", LMS)
def test_language_model_equals_fairseqs_transformer_lm(name, variant):
    """The language-model path: fairseq 0.12.2's transformer_lm_wiki103 (Post-LN, and Pre-LN without a final
    norm, as that architecture has it) and the authors' fork's (B2T, the paper's LM), adaptive input and softmax
    tied, on shared weights: the full log-distribution at every position (1e-5), and the gradient of the summed
    NLL fairseq's adaptive_loss trains with, for every parameter (relative, as above)."""
    fx = torch.load(FIXTURES / f"{name}.pt", weights_only=True)
    sizes = ["model.decoder_layers=2", "model.d_model=16", "model.ffn_dim=32", "model.heads=2", "model.dropout=0.0",
             "model.attention_dropout=0.0", "model.activation_dropout=0.0", "model.adaptive_softmax_dropout=0.0",
             f"model.adaptive_cutoffs={fx['cutoffs']}", f"model.adaptive_factor={fx['factor']}"]
    model = build_model(resolve(REPO / f"recipes/wikitext103/6L-{variant}.yaml", "tiny", sizes).recipe, 50, PAD)
    missing, unexpected = model.load_state_dict(from_fairseq(fx["weights"], variant), strict=False)
    assert not unexpected and missing and all(k.startswith("softmax.inp.") for k in missing)  # the tied input
    model.train()
    tokens = fx["tokens"]
    lp = model.softmax.log_probs(model.hidden(tokens[:, :-1]))
    assert (lp - fx["log_probs"]).abs().max() < 1e-5, fx["reference"]
    nll = -model.target_log_probs(tokens[:, :-1], tokens[:, 1:]).sum()
    assert nll.item() == pytest.approx(fx["nll"].item(), rel=1e-6)
    nll.backward()
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


def test_admin_profiling_gives_the_official_omegas():
    """Transformer-Clinic's `--init-type adaptive-profiling` pass on the same weights and batch: each omega is the
    running sqrt(Var(x * omega) + Var(F(x))) of the sublayers below it, over every place of the batch. The
    encoder's agree to rounding. The decoder's agree within 0.5%: fairseq's decoder also hides padded keys from
    the padded places themselves, which lnrepro's (causal only) does not, and the profile reads those places
    (docs/fidelity.md)."""
    from repro.model.init import admin_profile
    fx = torch.load(FIXTURES / "admin_fork.pt", weights_only=True)
    model = build_model(resolve(REPO / "recipes/6L-6L-admin.yaml", "tiny", SMALL).recipe, 50, PAD)
    model.load_state_dict(from_fairseq(fx["before_profiling"], "admin"))
    b = fx["batch"]
    admin_profile(model, lambda: model(b["src"], b["prev"]))
    official = from_fairseq(fx["weights"], "admin")
    omegas = {n: p for n, p in model.named_parameters() if n.endswith("omega")}
    assert len(omegas) == 10 == len(fx["profile_file"].split("\n")) - 1
    for n, omega in omegas.items():
        assert torch.equal(omega, omega[0].expand_as(omega)) and torch.equal(official[n], official[n][0].expand_as(omega))
        tolerance = 1e-6 if n.startswith("encoder") else 5e-3
        assert omega[0].item() == pytest.approx(official[n][0].item(), rel=tolerance), n
    assert any(o[0].item() > 2 for o in omegas.values())  # the profile moved them off 1


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


INITS = [("b2t_fork_init", "b2t_2023"), ("t_fixup_fork_init", "t_fixup"), ("admin_fork_init", "admin"),
         ("dlcl_fork_init", "dlcl")]


@pytest.mark.parametrize("name,variant", INITS)
def test_initialisation_matches_the_official_code(name, variant):
    """Every initial tensor has the spread (or the constant) the official code gives it (4+4 layers, d 32: a
    spread is measured within a few per cent): the authors' fork's 2023 B2T rescaling by N^-0.5 (rescaling_init,
    commit 4d80167), T-Fixup's scales of fixup_initialization and its embedding, Admin's and DLCL's older fairseq
    (xavier FFN, zero q/k/v biases, DLCL's averaging weights)."""
    fx = torch.load(FIXTURES / f"{name}.pt", weights_only=True)
    ratios = _spread_ratios(variant, fx)
    off = {n: r for n, (r, band) in ratios.items() if not 1 - band < r < 1 + band}
    assert not off, off


def test_the_2022_b2t_initialisation_is_told_apart_from_the_2023_one():
    """The comparison above can fail: the paper's B2T, not rescaled, is twice as wide in every layer weight."""
    paper = _spread_ratios("b2t", torch.load(FIXTURES / "b2t_fork_init.pt", weights_only=True))
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


def _x_transformers_state(state: dict, cross: bool) -> dict[str, torch.Tensor]:
    """x-transformers' AttentionLayers (sandwich_norm) under lnrepro's LayerStack names. Its sublayers are numbered
    in order (a, f per encoder layer; a, c, f per decoder layer), each with [pre-branch norm, post-branch norm];
    its norms have no bias and its attention projections none, so lnrepro's are zero."""
    kinds = ("attn", "cross", "ffn") if cross else ("attn", "ffn")
    out = {"final_norm.weight": state["final_norm.gamma"], "final_norm.bias": torch.zeros(D_XT)}
    for j in range(len(kinds) * 2):
        layer, kind = j // len(kinds), kinds[j % len(kinds)]
        pre, post = f"layers.{j}.0.0.gamma", f"layers.{j}.0.1.gamma"
        here = f"layers.{layer}"
        out[f"{here}.pre_{kind}_norm.weight"], out[f"{here}.{kind}_out_norm.weight"] = state[pre], state[post]
        out[f"{here}.pre_{kind}_norm.bias"] = out[f"{here}.{kind}_out_norm.bias"] = torch.zeros(D_XT)
        block = f"layers.{j}.1"
        if kind == "ffn":
            for ours, theirs in (("fc1", "ff.0.0"), ("fc2", "ff.2")):
                for part in ("weight", "bias"):
                    out[f"{here}.ffn.{ours}.{part}"] = state[f"{block}.{theirs}.{part}"]
            continue
        q, k, v = (state[f"{block}.to_{p}.weight"] for p in "qkv")
        name = "self_attn" if kind == "attn" else "cross_attn"
        if kind == "attn":
            out[f"{here}.{name}.qkv_proj.weight"] = torch.cat([q, k, v])
            out[f"{here}.{name}.qkv_proj.bias"] = torch.zeros(3 * D_XT)
        else:
            out[f"{here}.{name}.q_proj.weight"], out[f"{here}.{name}.q_proj.bias"] = q, torch.zeros(D_XT)
            out[f"{here}.{name}.kv_proj.weight"] = torch.cat([k, v])
            out[f"{here}.{name}.kv_proj.bias"] = torch.zeros(2 * D_XT)
        out[f"{here}.{name}.out_proj.weight"] = state[f"{block}.to_out.weight"]
        out[f"{here}.{name}.out_proj.bias"] = torch.zeros(D_XT)
    return out


D_XT = 16


def test_peri_ln_stacks_equal_x_transformers_sandwich_norm():
    """Peri-LN against x-transformers' Encoder and Decoder with `sandwich_norm` on shared weights (2 layers each,
    a padded source, the causal decoder reading it): outputs (1e-5) and the gradient of every weight x-transformers
    has (1e-4), the norms' gains and the FFN biases included, and the final norm."""
    from repro.model.stack import LayerStack
    from repro.model.variants import VARIANTS
    fx = torch.load(FIXTURES / "peri_ln_xtransformers.pt", weights_only=True)
    v = VARIANTS["peri_ln"]
    enc = LayerStack(v, 2, D_XT, 32, 2, 0.0, 0.0, 0.0, cross_attention=False).train()
    dec = LayerStack(v, 2, D_XT, 32, 2, 0.0, 0.0, 0.0, cross_attention=True).train()
    enc.load_state_dict(_x_transformers_state(fx["encoder"], cross=False))
    dec.load_state_dict(_x_transformers_state(fx["decoder"], cross=True))
    keep = fx["src_keep"]
    enc_out = enc(fx["src"], self_mask=keep.unsqueeze(1))
    assert (enc_out - fx["encoder_out"])[keep].abs().max() < 1e-5
    dec_out = dec(fx["tgt"], causal=True, memory=enc_out.detach(), memory_mask=keep.unsqueeze(1))
    assert (dec_out - fx["decoder_out"]).abs().max() < 1e-5
    weight_e, weight_d = fx["loss_weights"]
    ((enc_out * weight_e)[keep].sum() + (dec_out * weight_d).sum()).backward()
    for stack, grads, cross in ((enc, fx["encoder_grads"], False), (dec, fx["decoder_grads"], True)):
        mine = dict(stack.named_parameters())
        for n, g in _x_transformers_state(grads, cross).items():
            if n.endswith("bias") and ".ffn.fc" not in n:
                continue  # a parameter x-transformers does not have (its norms and attention have no bias)
            assert (mine[n].grad - g).abs().max() < 1e-4, n


def test_mix_ln_stack_equals_the_official_wiring():
    """Mix-LN's official LlamaModel (NORM_TYPE=post_pre, 8 layers) run through its own forward, its sublayers and
    norms swapped for torch's causal attention, a ReLU FFN and LayerNorms: which layers are Post-LN (the lowest
    POST_NUM = floor(0.25 * 8) = 2), where each norm sits, and the final norm, against lnrepro's mix_ln stack on
    the same weights: outputs (1e-5) and every gradient (1e-4)."""
    from repro.model.stack import LayerStack
    from repro.model.variants import VARIANTS, mix_ln_post_layers
    fx = torch.load(FIXTURES / "mix_ln_official.pt", weights_only=True)
    v = VARIANTS["mix_ln"]
    assert mix_ln_post_layers(v.post_ln_fraction, fx["layers"]) == fx["post_num"]
    stack = LayerStack(v, fx["layers"], 16, 32, 2, 0.0, 0.0, 0.0, cross_attention=False).train()

    def ours(state: dict) -> dict[str, torch.Tensor]:
        out = {f"final_norm.{k}": state[f"norm.{k}"] for k in ("weight", "bias")}
        for i in range(fx["layers"]):
            post = i < fx["post_num"]
            assert fx["norms"][i] == (["post_attention_layernorm", "post_feedforward_layernorm"] if post
                                      else ["input_layernorm", "post_attention_layernorm"])
            slots = ({"post_attention_layernorm": "post_attn_norm", "post_feedforward_layernorm": "post_ffn_norm"}
                     if post else {"input_layernorm": "pre_attn_norm", "post_attention_layernorm": "pre_ffn_norm"})
            for k in ("weight", "bias"):
                for theirs, slot in slots.items():
                    out[f"layers.{i}.{slot}.{k}"] = state[f"layers.{i}.{theirs}.{k}"]
                out[f"layers.{i}.self_attn.qkv_proj.{k}"] = state[f"layers.{i}.self_attn.mha.in_proj_{k}"]
                out[f"layers.{i}.self_attn.out_proj.{k}"] = state[f"layers.{i}.self_attn.mha.out_proj.{k}"]
                out[f"layers.{i}.ffn.fc1.{k}"] = state[f"layers.{i}.mlp.0.{k}"]
                out[f"layers.{i}.ffn.fc2.{k}"] = state[f"layers.{i}.mlp.2.{k}"]
        return out

    stack.load_state_dict(ours(fx["weights"]))
    y = stack(fx["x"], causal=True)
    assert (y - fx["out"]).abs().max() < 1e-5
    (y * fx["loss_weight"]).sum().backward()
    for n, g in ours(fx["grads"]).items():
        assert (dict(stack.named_parameters())[n].grad - g).abs().max() < 1e-4, n


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


@pytest.mark.parametrize("case", ["longer dict", "shorter dict", "empty source", "lenpen nan", "negative max-len-a",
                                  "negative max-len-b", "empty bpe codes"])
def test_score_fairseq_refuses_inputs_that_would_translate_wrongly(tmp_path, case):
    """Each in one line, exit 2, before any translation: a dictionary that is not the checkpoint's (longer than its
    embedding, or far shorter: every word another's), no sentence, a length penalty or limit that is no length,
    BPE codes without a merge."""
    from typer.testing import CliRunner

    from repro.cli import app
    symbols = (CHECKPOINTS / "dict.en.txt").read_text().splitlines()
    dictionary = tmp_path / "dict.txt"
    dictionary.write_text("\n".join(symbols + [f"extra{i} 1" for i in range(9)] if case == "longer dict"
                                    else symbols[:-12] if case == "shorter dict" else symbols) + "\n")
    source = tmp_path / "source.txt"
    source.write_text("" if case == "empty source" else "w5 w17 w3\n")
    codes = tmp_path / "codes"
    codes.write_text("#version: 0.2\n")
    extra = {"lenpen nan": ["--lenpen", "nan"], "negative max-len-a": ["--max-len-a", "-1"],
             "negative max-len-b": ["--max-len-b", "-5"], "empty bpe codes": ["--bpe-codes", str(codes)]}
    r = CliRunner().invoke(app, ["score-fairseq", str(CHECKPOINTS / "checkpoint_best.pt"), "--dict", str(dictionary),
                                 "--source", str(source), "--tokenizer", "none", "--out", str(tmp_path / "h.txt"),
                                 *extra.get(case, [])])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert not (tmp_path / "h.txt").exists()
    named = {"longer dict": "dict.txt", "shorter dict": "dict.txt", "empty source": "source.txt",
             "lenpen nan": "--lenpen", "negative max-len-a": "--max-len-a", "negative max-len-b": "max-len-b",
             "empty bpe codes": "codes"}[case]
    assert named in r.output
