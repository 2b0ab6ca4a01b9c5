"""The eight variants against references written from the papers' equations, and against torch's own layers."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from repro.model.block import DyT, TransformerLayer
from repro.model.init import admin_profile, apply_variant_init, load_admin_profile, save_admin_profile
from repro.model.seq2seq import EncoderDecoder
from repro.model.stack import LayerStack
from repro.model.variants import VARIANTS, b2t_noln_alpha, b2t_noln_beta, deepnet_constants

D, H, FF = 16, 4, 32


def make_layer(name, cross, alpha=1.0, beta=1.0, seed=0):
    torch.manual_seed(seed)
    layer = TransformerLayer(VARIANTS[name], D, FF, H, 0.0, 0.0, 0.0, cross, alpha=alpha, beta=beta)
    with torch.no_grad():  # non-trivial norm affine parameters and Admin omegas
        for m in layer.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
            if isinstance(m, DyT):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
                m.alpha.fill_(0.7)
        for p_name, p in layer.named_parameters():
            if p_name.endswith("omega"):
                p.uniform_(1.0, 3.0)
            if p_name.endswith("residual.alpha"):  # ReZero's gates, opened
                p.fill_(0.6)
    return layer.eval()


# -- a plain reference, written from the equations with explicit softmax attention -----------------------

def ref_attention(mha, x, memory=None, causal=False, key_mask=None):
    q_w, k_w, v_w = mha.q_k_v_weights()
    if mha.cross:
        q_b, (k_b, v_b) = mha.q_proj.bias, mha.kv_proj.bias.chunk(2)
    else:
        q_b, k_b, v_b = mha.qkv_proj.bias.chunk(3)
    src = x if memory is None else memory
    q, k, v = F.linear(x, q_w, q_b), F.linear(src, k_w, k_b), F.linear(src, v_w, v_b)
    b, t, _ = q.shape
    s = k.size(1)
    split = lambda z, n: z.view(b, n, H, D // H).transpose(1, 2)
    q, k, v = split(q, t), split(k, s), split(v, s)
    scores = q @ k.transpose(-1, -2) / math.sqrt(D // H)
    if causal:
        scores = scores.masked_fill(torch.ones(t, s, dtype=torch.bool).triu(1), float("-inf"))
    if key_mask is not None:
        scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, D)
    return mha.out_proj(out)


def ref_layer(layer, name, x, memory=None, alpha=1.0, beta=1.0):
    if name.startswith("dyt_"):  # DyT (Zhu et al. 2025): gamma * tanh(alpha * z) + beta in every norm's place
        ln = lambda m, z: m.weight * torch.tanh(m.alpha * z) + m.bias
        name = {"dyt_pre": "pre_ln", "dyt_post": "post_ln"}[name]
    else:
        ln = lambda m, z: F.layer_norm(z, (D,), m.weight, m.bias)
    name = {"b2t_2023": "b2t", "residual": "post_ln", "mix_ln": "pre_ln"}.get(name, name)  # layer-level equations
    ffn = lambda z: layer.ffn.fc2(F.relu(layer.ffn.fc1(z)))
    sa = lambda z: ref_attention(layer.self_attn, z, causal=memory is not None)
    ca = lambda z: ref_attention(layer.cross_attn, z, memory=memory)
    subs = [(sa, "attn", layer.attn_residual)]
    if memory is not None:
        subs.append((ca, "cross", layer.cross_residual))
    x_inp = x
    if name in ("post_ln", "b2t", "deepnet", "admin"):
        for f, slot, res in subs:
            skip = alpha * x if name == "deepnet" else x * res.omega if name == "admin" else x
            x = ln(getattr(layer, f"post_{slot}_norm"), skip + f(x))
        if name == "b2t":
            return ln(layer.post_ffn_norm, x_inp + x + ffn(x))                       # eq. 5
        skip = alpha * x if name == "deepnet" else x * layer.ffn_residual.omega if name == "admin" else x
        return ln(layer.post_ffn_norm, skip + ffn(x))                                 # eq. 1
    if name in ("pre_ln", "dlcl"):
        for f, slot, _ in subs:
            x = x + f(ln(getattr(layer, f"pre_{slot}_norm"), x))                     # eq. 2
        return x + ffn(ln(layer.pre_ffn_norm, x))
    if name == "b2t_noln":
        for f, _, _ in subs:
            x = x + f(x)
        return alpha * x_inp + beta * (x + ffn(x))                                    # eq. 6
    if name == "t_fixup":
        for f, _, _ in subs:
            x = x + f(x)
        return x + ffn(x)
    if name == "peri_ln":  # x + LN_out(F(LN_in(x)))
        for f, slot, _ in subs:
            x = x + ln(getattr(layer, f"{slot}_out_norm"), f(ln(getattr(layer, f"pre_{slot}_norm"), x)))
        return x + ln(layer.ffn_out_norm, ffn(ln(layer.pre_ffn_norm, x)))
    if name == "rezero":  # x + a * F(x)
        for f, _, res in subs:
            x = x + res.alpha * f(x)
        return x + layer.ffn_residual.alpha * ffn(x)
    raise AssertionError(name)


@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("cross", [False, True])
def test_layer_matches_equation(name, cross):
    alpha, beta = {"b2t_noln": (b2t_noln_alpha(18), b2t_noln_beta(D)), "deepnet": (1.7, 1.0)}.get(name, (1.0, 1.0))
    layer = make_layer(name, cross, alpha, beta)
    torch.manual_seed(1)
    x = torch.randn(2, 5, D)
    memory = torch.randn(2, 7, D) if cross else None
    with torch.no_grad():
        ours = layer(x, causal=cross, memory=memory)
        ref = ref_layer(layer, name, x, memory, alpha, beta)
    assert (ours - ref).abs().max() < 1e-5


@torch.no_grad()
def copy_self_attention_and_ffn(ref, layer, slot):
    """Our self-attention, FFN and first norm into a torch layer (torch's norm1 is the self-attention norm)."""
    ref.self_attn.in_proj_weight.copy_(layer.self_attn.qkv_proj.weight)
    ref.self_attn.in_proj_bias.copy_(layer.self_attn.qkv_proj.bias)
    ref.self_attn.out_proj.load_state_dict(layer.self_attn.out_proj.state_dict())
    ref.linear1.load_state_dict(layer.ffn.fc1.state_dict())
    ref.linear2.load_state_dict(layer.ffn.fc2.state_dict())
    ref.norm1.load_state_dict(getattr(layer, f"{slot}_attn_norm").state_dict())


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_torch(norm_first):
    layer = make_layer("pre_ln" if norm_first else "post_ln", cross=False)
    ref = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation="relu", batch_first=True,
                                     norm_first=norm_first).eval()
    slot = "pre" if norm_first else "post"
    copy_self_attention_and_ffn(ref, layer, slot)
    with torch.no_grad():
        ref.norm2.load_state_dict(getattr(layer, f"{slot}_ffn_norm").state_dict())
    x = torch.randn(3, 6, D)
    keep = torch.ones(3, 6, dtype=torch.bool)
    keep[1, 4:] = False
    with torch.no_grad():
        ours = layer(x, self_mask=keep[:, None, :])
        theirs = ref(x, src_key_padding_mask=~keep)
    assert (ours - theirs)[keep].abs().max() <= 1e-5


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(norm_first):
    layer = make_layer("pre_ln" if norm_first else "post_ln", cross=True)
    ref = nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, activation="relu", batch_first=True,
                                     norm_first=norm_first).eval()
    slot = "pre" if norm_first else "post"
    copy_self_attention_and_ffn(ref, layer, slot)
    with torch.no_grad():
        ref.multihead_attn.in_proj_weight.copy_(torch.cat([layer.cross_attn.q_proj.weight,
                                                           layer.cross_attn.kv_proj.weight]))
        ref.multihead_attn.in_proj_bias.copy_(torch.cat([layer.cross_attn.q_proj.bias, layer.cross_attn.kv_proj.bias]))
        ref.multihead_attn.out_proj.load_state_dict(layer.cross_attn.out_proj.state_dict())
        ref.norm2.load_state_dict(getattr(layer, f"{slot}_cross_norm").state_dict())
        ref.norm3.load_state_dict(getattr(layer, f"{slot}_ffn_norm").state_dict())
    x, memory = torch.randn(2, 5, D), torch.randn(2, 7, D)
    keep = torch.ones(2, 7, dtype=torch.bool)
    keep[0, 5:] = False
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    with torch.no_grad():
        ours = layer(x, causal=True, memory=memory, memory_mask=keep[:, None, :])
        theirs = ref(x, memory, tgt_mask=causal, memory_key_padding_mask=~keep, tgt_is_causal=True)
    assert (ours - theirs).abs().max() <= 1e-5


def tiny_model(name, enc=3, dec=3, seed=0, dropout=0.0):
    torch.manual_seed(seed)
    m = EncoderDecoder(VARIANTS[name], 40, 1, D, FF, H, enc, dec, dropout)
    apply_variant_init(m, [m.embed_tokens])
    return m


def count_layernorms(module):
    return sum(isinstance(m, nn.LayerNorm) for m in module.modules())


def test_norm_counts():
    assert count_layernorms(tiny_model("t_fixup")) == 0
    assert count_layernorms(tiny_model("b2t_noln")) == 0
    pre = tiny_model("pre_ln")
    assert isinstance(pre.encoder.final_norm, nn.LayerNorm) and isinstance(pre.decoder.final_norm, nn.LayerNorm)
    # 2 per encoder layer + 3 per decoder layer + exactly one final LN per stack
    assert count_layernorms(pre) == 3 * 2 + 3 * 3 + 2
    post = tiny_model("post_ln")
    assert count_layernorms(post) == 3 * 2 + 3 * 3
    b2t = tiny_model("b2t")
    assert count_layernorms(b2t) == count_layernorms(post)


@pytest.mark.parametrize("n", [6, 12, 18, 60])
def test_derived_constants(n):
    assert b2t_noln_alpha(n) == pytest.approx(min(n / 12, n ** -0.15))
    assert b2t_noln_beta(512) == pytest.approx(512 ** -0.2)
    c = deepnet_constants(n, n)
    assert c["encoder_alpha"] == pytest.approx(0.81 * (n ** 4 * n) ** (1 / 16))
    assert c["encoder_beta"] == pytest.approx(0.87 * (n ** 4 * n) ** (-1 / 16))
    assert c["decoder_alpha"] == pytest.approx((3 * n) ** 0.25)
    assert c["decoder_beta"] == pytest.approx((12 * n) ** -0.25)
    lm = deepnet_constants(0, n)
    assert lm["decoder_alpha"] == pytest.approx((2 * n) ** 0.25) and lm["decoder_beta"] == pytest.approx((8 * n) ** -0.25)
    # The stacks really use them
    m = EncoderDecoder(VARIANTS["b2t_noln"], 20, 1, D, FF, H, n if n < 20 else 2, 3, 0.0)
    enc_n = n if n < 20 else 2
    assert m.encoder.layers[0].b2t_alpha.item() == pytest.approx(b2t_noln_alpha(enc_n))
    assert m.decoder.layers[0].b2t_alpha.item() == pytest.approx(b2t_noln_alpha(3))


def test_b2t_noln_alpha_examples():
    # Appendix D: alpha grows until N = 9, then decreases.
    assert b2t_noln_alpha(6) == pytest.approx(0.5)
    assert b2t_noln_alpha(9) > b2t_noln_alpha(8) and b2t_noln_alpha(10) < b2t_noln_alpha(9)


def test_b2t_noln_beta_depends_on_width_so_mini_grows_what_paper_width_shrinks():
    """Eq. 8's beta = d^-0.2 was set for d 512: at mini's d 128 it is 0.379, alpha + beta > 1 at 18 layers, and a
    freshly initialised 18-layer stack widens its input where the paper's width narrows it (docs/reduced-scale.md)."""
    assert b2t_noln_alpha(18) + b2t_noln_beta(128) > 1 > b2t_noln_alpha(18) + b2t_noln_beta(512)
    rms = {}
    for d in (128, 512):
        torch.manual_seed(0)
        stack = LayerStack(VARIANTS["b2t_noln"], 18, d, 4 * d, 8, 0.0, 0.0, 0.0, cross_attention=False).eval()
        with torch.no_grad():
            rms[d] = stack(torch.randn(2, 16, d)).pow(2).mean().sqrt().item()
    assert rms[128] > 1.5 and rms[512] < 0.5


def test_deepnet_model_uses_alpha_and_beta_gain():
    m = tiny_model("deepnet", enc=6, dec=6)
    c = deepnet_constants(6, 6)
    assert m.encoder.layers[0].attn_residual.alpha.item() == pytest.approx(c["encoder_alpha"])
    assert m.decoder.layers[0].ffn_residual.alpha.item() == pytest.approx(c["decoder_alpha"])
    # xavier_normal std = gain * sqrt(2 / (fan_in + fan_out)); check over all decoder FFN weights together
    w = torch.cat([l.ffn.fc1.weight.flatten() for l in m.decoder.layers])
    expected = c["decoder_beta"] * math.sqrt(2 / (D + FF))
    assert w.std().item() == pytest.approx(expected, rel=0.1)


def test_t_fixup_scales_value_and_output():
    m = tiny_model("t_fixup", enc=6, dec=6)
    v = torch.cat([l.self_attn.q_k_v_weights()[2].flatten() for l in m.decoder.layers])
    bound = math.sqrt(6 / (2 * D)) * (9 * 6) ** -0.25  # xavier_uniform gain 1 times (9 N_d)^-1/4
    assert v.abs().max().item() <= bound + 1e-6 and v.abs().max().item() > 0.8 * bound
    emb_std = m.embed_tokens.weight[2:].std().item()
    assert emb_std == pytest.approx(D ** -0.5 * (9 * 6) ** -0.25, rel=0.15)


def test_dlcl_weights_start_at_average():
    m = tiny_model("dlcl", enc=4, dec=2)
    w = m.encoder.dlcl.weights.detach()
    for l in range(5):
        assert torch.allclose(w[l, : l + 1], torch.full((l + 1,), 1 / (l + 1)))
        assert torch.all(w[l, l + 1:] == 0)
    assert isinstance(m.encoder.dlcl.norms[0], nn.Identity)


def test_dlcl_stack_matches_equation_and_normalises_each_output_once():
    """Layer l+1's input is sum_k W[l, k] LN_k(y_k) (y_0 the embedding, not normalised); the stack's output is row
    L's sum under the final LN. Each LN_k runs once per forward, not once per later layer."""
    torch.manual_seed(0)
    stack = LayerStack(VARIANTS["dlcl"], 4, D, FF, H, 0.0, 0.0, 0.0, cross_attention=False).eval()
    with torch.no_grad():
        stack.dlcl.weights.copy_(torch.rand(5, 5).tril())
        for m in stack.dlcl.norms[1:]:
            m.weight.uniform_(0.5, 1.5)
            m.bias.uniform_(-0.5, 0.5)
    calls = [0] * 5
    for k, norm in enumerate(stack.dlcl.norms):
        norm.register_forward_hook(lambda *_, k=k: calls.__setitem__(k, calls[k] + 1))
    x = torch.randn(2, 7, D)
    out = stack(x)
    assert calls == [1] * 5
    w, norms = stack.dlcl.weights.detach(), stack.dlcl.norms
    ys = [x]
    for l, layer in enumerate(stack.layers):
        ys.append(layer(sum(w[l, k] * norms[k](y) for k, y in enumerate(ys))))
    ref = stack.final_norm(sum(w[4, k] * norms[k](y) for k, y in enumerate(ys)))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_admin_profile_is_deterministic_and_sets_scale(tmp_path):
    src = torch.randint(2, 40, (4, 9))
    prev = torch.randint(2, 40, (4, 6))
    profiles = []
    for _ in range(2):
        m = tiny_model("admin", enc=4, dec=4, seed=3, dropout=0.1)
        profiles.append(admin_profile(m, lambda: m(src, prev)))
    assert profiles[0] == profiles[1]
    enc = [o[0] for o in profiles[0]["encoder"]]
    assert enc[0] == 1.0 and all(b > a for a, b in zip(enc, enc[1:]))  # accumulated variance grows
    # Saved and reloaded into a fresh model: same outputs as the profiled one
    m = tiny_model("admin", enc=4, dec=4, seed=3)
    before = m.eval()(src, prev)
    profile = admin_profile(m, lambda: m(src, prev))
    after = m(src, prev)
    assert not torch.allclose(before, after)
    path = tmp_path / "admin_profile.json"
    save_admin_profile(profile, path)
    fresh = tiny_model("admin", enc=4, dec=4, seed=3).eval()
    load_admin_profile(fresh, path)
    assert torch.allclose(fresh(src, prev), after)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_parameter_gets_a_gradient(name):
    m = tiny_model(name, dropout=0.1).train()
    src = torch.randint(2, 40, (3, 8))
    src[0, 6:] = 1
    out = m(src, torch.randint(2, 40, (3, 5)))
    out.logsumexp(-1).sum().backward()
    missing = [n for n, p in m.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing


@pytest.mark.parametrize("name", list(VARIANTS))
def test_cached_decoding_equals_full(name):
    m = tiny_model(name).eval()
    src = torch.randint(2, 40, (2, 7))
    src[1, 5:] = 1
    prev = torch.randint(2, 40, (2, 6))
    with torch.no_grad():
        memory, mask = m.encode(src)
        full = m.decode(prev, memory, mask).log_softmax(-1)
        cache = m.new_cache()
        steps = [m.decode(prev[:, t: t + 1], memory, mask, cache=cache).log_softmax(-1) for t in range(6)]
    assert (torch.cat(steps, dim=1) - full).abs().max() <= 1e-5


def test_print_names_variant_and_coefficients():
    text = repr(tiny_model("b2t_noln", enc=18, dec=3))
    assert "variant=b2t_noln" in text and f"b2t_alpha={b2t_noln_alpha(18):.4f}" in text
    assert "alpha=" in repr(tiny_model("deepnet"))


def test_b2t_depth_scaled_init_is_opt_in():
    plain = tiny_model("b2t", enc=4, dec=4)
    torch.manual_seed(0)
    scaled = EncoderDecoder(VARIANTS["b2t"], 40, 1, D, FF, H, 4, 4, 0.0)
    apply_variant_init(scaled, [scaled.embed_tokens], b2t_depth_scaled=True)
    a, b = plain.encoder.layers[0].ffn.fc1.weight, scaled.encoder.layers[0].ffn.fc1.weight
    assert torch.allclose(b, a * 4 ** -0.5)
    with pytest.raises(ValueError):
        apply_variant_init(tiny_model("pre_ln"), [], b2t_depth_scaled=True)


def test_stack_records_layer_outputs():
    stack = LayerStack(VARIANTS["post_ln"], 4, D, FF, H, 0.0, 0.0, 0.0, cross_attention=False)
    outs = []
    stack(torch.randn(2, 3, D), layer_outputs=outs)
    assert len(outs) == 4


@pytest.mark.parametrize("name", list(VARIANTS))
def test_ffn_init_follows_each_methods_code(name):
    """Authors' fork (and torchscale): nn.Linear's own init, biases non-zero, fc2 bound 1/sqrt(ffn_dim).
    T-Fixup, Admin and DLCL repositories: xavier_uniform, zero biases (T-Fixup then rescales)."""
    d, ff = 64, 256
    torch.manual_seed(0)
    m = EncoderDecoder(VARIANTS[name], 40, 1, d, ff, H, 2, 2, 0.0)
    apply_variant_init(m, [m.embed_tokens])
    fc1, fc2 = m.encoder.layers[0].ffn.fc1, m.encoder.layers[0].ffn.fc2
    kind = VARIANTS[name].ffn_init
    assert VARIANTS[name].ffn_init_source
    if kind == "torch":
        assert fc1.bias.abs().max() > 0 and fc2.bias.abs().max() > 0
        assert fc2.bias.abs().max() <= ff ** -0.5 + 1e-6
        if VARIANTS[name].init == "default":  # not re-initialised afterwards
            assert fc2.weight.abs().max() <= ff ** -0.5 + 1e-6 < math.sqrt(6 / (d + ff)) * 0.9
            assert fc2.weight.abs().max() > 0.9 * ff ** -0.5
    else:
        assert torch.all(fc1.bias == 0) and torch.all(fc2.bias == 0)
        if VARIANTS[name].init == "default":
            bound = math.sqrt(6 / (d + ff))
            assert 0.9 * bound < fc2.weight.abs().max() <= bound + 1e-6


def test_admin_profile_runs_in_training_mode_with_dropout():
    m = tiny_model("admin", enc=2, dec=2, dropout=0.3).eval()
    src, prev = torch.randint(4, 40, (2, 7)), torch.randint(4, 40, (2, 5))
    seen = []
    admin_profile(m, lambda: (seen.append(m.training), m(src, prev)))
    assert seen == [True] and not m.training  # profiled with dropout on, mode restored afterwards
    torch.manual_seed(0)
    omega_train = admin_profile(m, lambda: m(src, prev))["decoder"][-1][0]
    no_dropout = tiny_model("admin", enc=2, dec=2, dropout=0.0)
    omega_eval = admin_profile(no_dropout, lambda: no_dropout(src, prev))["decoder"][-1][0]
    assert omega_train > omega_eval  # dropout's variance raises the running scale


# -- the newer placements, at the level of a stack ------------------------------------------------------------

def test_residual_stack_adds_the_final_norm_of_a_dual_stream():
    """ResiDual (Xie et al. 2023; microsoft/ResiDual resi_dual.py): a Post-LN stream and a dual stream that starts
    at the embedding and sums every sublayer's output; the stack returns the first plus LN(second), an LN of eps
    1e-7."""
    torch.manual_seed(0)
    stack = LayerStack(VARIANTS["residual"], 3, D, FF, H, 0.0, 0.0, 0.0, cross_attention=False).eval()
    x = torch.randn(2, 5, D)
    post, dual = x, x
    with torch.no_grad():
        for layer in stack.layers:
            outs = []
            h = layer.self_attn(post)
            outs.append(h)
            post = layer.post_attn_norm(post + h)
            h = layer.ffn(post)
            outs.append(h)
            post = layer.post_ffn_norm(post + h)
            dual = dual + sum(outs)
        ref = post + F.layer_norm(dual, (D,), stack.final_norm.weight, stack.final_norm.bias, eps=1e-7)
        assert (stack(x) - ref).abs().max() < 1e-5


def test_mix_ln_lowest_quarter_post_ln_rest_pre_ln():
    stack = LayerStack(VARIANTS["mix_ln"], 8, D, FF, H, 0.0, 0.0, 0.0, cross_attention=True)
    post = [isinstance(l.post_ffn_norm, nn.LayerNorm) and isinstance(l.pre_ffn_norm, nn.Identity) for l in stack.layers]
    assert post == [True, True] + [False] * 6      # floor(0.25 * 8) = 2 (Li et al. 2025, alpha = 0.25)
    assert all(isinstance(l.pre_attn_norm, nn.LayerNorm) for l in stack.layers[2:])
    assert isinstance(stack.final_norm, nn.LayerNorm) and "Post-LN layer" in repr(stack.layers[0])


def test_rezero_starts_as_the_identity_and_dyt_replaces_every_layernorm():
    m = tiny_model("rezero").eval()
    x = torch.randn(2, 5, D)
    with torch.no_grad():
        assert torch.equal(m.encoder(x), x)          # every gate a = 0: each layer returns its input
    assert count_layernorms(m) == 0
    for name in ("dyt_pre", "dyt_post"):
        dyt = tiny_model(name)
        assert count_layernorms(dyt) == 0
        n = sum(isinstance(mod, DyT) for mod in dyt.modules())
        assert n == count_layernorms(tiny_model(name.replace("dyt_", "") + "_ln"))
        assert "alpha=0.5000" in repr(dyt)
    assert "rezero, alpha=0.0000" in repr(m)
    peri = tiny_model("peri_ln")
    assert count_layernorms(peri) == 2 * (3 * 2 + 3 * 3) + 2  # in and out of every sublayer, one final per stack


def test_b2t_2023_scales_every_layer_weight_by_depth():
    torch.manual_seed(0)
    plain = EncoderDecoder(VARIANTS["b2t"], 40, 1, D, FF, H, 4, 9, 0.0)
    torch.manual_seed(0)
    new = EncoderDecoder(VARIANTS["b2t_2023"], 40, 1, D, FF, H, 4, 9, 0.0)
    apply_variant_init(new, [new.embed_tokens])
    assert torch.allclose(new.encoder.layers[0].ffn.fc1.weight, plain.encoder.layers[0].ffn.fc1.weight * 4 ** -0.5)
    assert torch.allclose(new.decoder.layers[2].cross_attn.out_proj.weight,
                          plain.decoder.layers[2].cross_attn.out_proj.weight * 9 ** -0.5)
    assert torch.equal(new.encoder.layers[0].post_ffn_norm.weight, plain.encoder.layers[0].post_ffn_norm.weight)
    with pytest.raises(ValueError):
        apply_variant_init(new, [new.embed_tokens], b2t_depth_scaled=True)  # never twice
    text = repr(new)
    assert "variant=b2t_2023" in text and "init weights x N^-0.5 = 0.5000" in text and "= 0.3333" in text
    assert "Post-LN layers 2" in repr(LayerStack(VARIANTS["mix_ln"], 8, D, FF, H, 0.0, 0.0, 0.0, False))
    assert "dual stream" in repr(tiny_model("residual"))


def test_rezero_has_one_gate_per_layer_shared_by_its_sublayers():
    """majumderb/rezero rztx.py: one `resweight` per layer, multiplying both (all) its sublayers' outputs."""
    m = tiny_model("rezero", enc=3, dec=2)
    gates = [n for n, _ in m.named_parameters() if n.endswith("residual.alpha")]
    assert len(gates) == 3 + 2
    for layer in [*m.encoder.layers, *m.decoder.layers]:
        assert layer.ffn_residual is layer.attn_residual
    assert m.decoder.layers[0].cross_residual is m.decoder.layers[0].attn_residual


def test_peri_ln_normalises_the_dropped_out_output():
    """CogView's Sandwich-LN and x-transformers' sandwich_norm: x + LN(drop(F(LN(x)))), so the added branch is a
    normalised vector even in training, with dropout on."""
    torch.manual_seed(0)
    layer = TransformerLayer(VARIANTS["peri_ln"], D, FF, H, 0.5, 0.0, 0.0, cross_attention=False).train()
    with torch.no_grad():  # the attention sublayer adds LN_out(0) = 0, so the layer adds the FFN's branch alone
        layer.self_attn.out_proj.weight.zero_()
        layer.self_attn.out_proj.bias.zero_()
    x = torch.randn(2, 7, D)
    h = layer(x) - x
    assert torch.allclose(h.mean(-1), torch.zeros(2, 7), atol=1e-5)
    assert torch.allclose(h.var(-1, unbiased=False), torch.ones(2, 7), atol=1e-3)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_qkv_biases_start_as_their_official_code_leaves_them(name):
    """fairseq 0.9 on (the authors' fork, T-Fixup's, and the rows built on them; torchscale alike) keeps nn.Linear's
    own q/k/v biases and zeroes the output projection's; older fairseq (DLCL's 0.5, Admin's 0.8) zeroes its fused
    in_proj_bias (tests/test_reference.py compares each repository's initial weights)."""
    m = tiny_model(name)
    attn = m.decoder.layers[0].cross_attn
    qkv = torch.cat([attn.q_proj.bias, attn.kv_proj.bias]), m.encoder.layers[0].self_attn.qkv_proj.bias
    assert torch.all(attn.out_proj.bias == 0) and torch.all(m.encoder.layers[0].self_attn.out_proj.bias == 0)
    for b in qkv:
        if VARIANTS[name].qkv_bias == "zero":
            assert torch.all(b == 0)
        else:
            assert b.abs().max() > 0 and b.abs().max() <= D ** -0.5 + 1e-6
    assert (VARIANTS[name].qkv_bias == "zero") == (name in ("dlcl", "admin"))


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_language_model_keeps_the_final_norm_its_methods_lm_has(name):
    """fairseq's transformer_lm_wiki103 (the paper's LM) has no final decoder norm for Pre-LN (and DLCL, trained
    the same way); ResiDual's final norm of the dual stream is part of the method (microsoft/ResiDual
    resi_dual/resi_dual.py), and Peri-LN, Mix-LN and DyT keep their own code's final norm."""
    from repro.model.lm import LanguageModel
    torch.manual_seed(0)
    lm = LanguageModel(VARIANTS[name], 60, 1, D, FF, H, 2, 0.0, 0.0, 0.0, [20, 40], 2.0)
    has = not isinstance(lm.decoder.final_norm, nn.Identity)
    assert has == (name in ("residual", "peri_ln", "mix_ln", "dyt_pre"))
