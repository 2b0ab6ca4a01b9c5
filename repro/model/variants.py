"""The eight layer variants of the paper, and the placements proposed since, as one table of data.

Each variant chooses among a few orthogonal mechanisms; model code reads these fields and never the
variant's name. A sublayer F is combined with its input x as

    post_norm( residual(x) + dropout(out_norm(F(pre_norm(x)))) )

and the layer's last sublayer (the FFN) may add a bottom-to-top (B2T) skip from the layer's input. The newer
methods (`EXTENSION`) are rows of the same table: an output norm (Peri-LN), a second, un-normalised residual stream
(ResiDual), Post-LN in the lowest layers and Pre-LN above (Mix-LN), DyT in place of every LayerNorm, a learned
residual gate starting at zero (ReZero), and the authors' 2023 B2T initialisation.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    name: str
    title: str
    citation: str
    pre_norm: bool
    """LayerNorm on each sublayer's input (Pre-LN, eq. 2)."""
    post_norm: bool
    """LayerNorm after each residual sum (Post-LN, eq. 1)."""
    b2t: str
    """'none'; 'with_ln': x_inp added before the layer's last LN (eq. 5);
    'scaled_no_ln': alpha*x_inp + beta*(x_ffn + FFN(x_ffn)) with no LN anywhere (eq. 6-8)."""
    residual: str
    """'identity': x + F; 'deepnet_alpha': alpha*x + F (DeepNorm); 'admin_omega': omega (.) x + F, omega set by
    profiling; 'rezero': x + a*F, a learned scalar per sublayer starting at 0 (ReZero)."""
    dlcl: bool
    """Dynamic linear combination of the outputs of all lower layers as each layer's input."""
    final_norm: bool
    """One LayerNorm after the whole stack (Pre-LN, DLCL)."""
    init: str
    """'default' (fairseq), 't_fixup', 'deepnet' or 'b2t_depth_scaled' (the authors' 2023 B2T init): see
    repro/model/init.py."""
    warmup: bool
    """Whether the learning rate warms up; T-Fixup trains without warmup."""
    ffn_init: str
    """FFN fc1/fc2 before any variant init: 'torch' (nn.Linear's own: kaiming-uniform weights, non-zero biases) or
    'xavier' (xavier_uniform weights, zero biases: older fairseq's `Linear` helper)."""
    ffn_init_source: str
    """The official code whose FFN construction `ffn_init` follows."""
    out_norm: bool = False
    """A norm on each sublayer's output before the residual sum (Peri-LN / Sandwich-LN)."""
    norm: str = "layernorm"
    """What every norm slot holds: 'layernorm', or 'dyt' (DyT: gamma * tanh(a * x) + beta, a learned scalar)."""
    dual_stream: bool = False
    """ResiDual: beside the Post-LN stream, an un-normalised stream from the embedding that sums every sublayer's
    output; the stack's output is the Post-LN stream plus the final norm of the dual one."""
    post_ln_fraction: float = 0.0
    """Mix-LN: the lowest floor(fraction * N) layers of each stack are Post-LN, the others as the row says."""
    qkv_bias: str = "torch"
    """Query/key/value projection biases at init: 'torch' (nn.Linear's own, as fairseq 0.9 and later leave them:
    `MultiheadAttention.reset_parameters` zeroes only the output projection's bias) or 'zero' (older fairseq's
    fused `in_proj_bias`, zeroed: the DLCL and Admin repositories). tests/test_reference.py compares each
    repository's initial weights with lnrepro's."""
    note: str = ""
    """What a table says beside the row: where the row departs from, or has no, official counterpart."""
    lm_final_norm: bool = True
    """Whether a language model keeps the stack's final norm (where the row has one). fairseq's
    transformer_lm_wiki103, the paper's LM, drops it (`no_decoder_final_norm`) for Pre-LN; the newer methods' own
    LM code keeps it (for ResiDual it is the dual stream's norm, part of the method)."""


# The authors' fork (the paper's code) builds its FFN with plain nn.Linear.
FORK = "takase/b2t_connection fairseq/modules/transformer_layer.py: build_fc1/build_fc2 return nn.Linear"

VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("post_ln", "Post-LN", "Vaswani et al. 2017", pre_norm=False, post_norm=True,
                b2t="none", residual="identity", dlcl=False, final_norm=False, init="default", warmup=True,
                ffn_init="torch", ffn_init_source=FORK),
        Variant("pre_ln", "Pre-LN", "Xiong et al. 2020", pre_norm=True, post_norm=False,
                b2t="none", residual="identity", dlcl=False, final_norm=True, init="default", warmup=True,
                ffn_init="torch", ffn_init_source=FORK, lm_final_norm=False),
        Variant("b2t", "B2T connection", "Takase et al. 2022, eq. 5", pre_norm=False, post_norm=True,
                b2t="with_ln", residual="identity", dlcl=False, final_norm=False, init="default", warmup=True,
                ffn_init="torch", ffn_init_source=FORK),
        Variant("b2t_noln", "+ w/o LN", "Takase et al. 2022, Appendix D, eq. 6-8", pre_norm=False, post_norm=False,
                b2t="scaled_no_ln", residual="identity", dlcl=False, final_norm=False, init="default", warmup=True,
                ffn_init="torch", ffn_init_source=FORK),
        Variant("dlcl", "DLCL", "Wang et al. 2019", pre_norm=True, post_norm=False,
                b2t="none", residual="identity", dlcl=True, final_norm=True, init="default", warmup=True,
                ffn_init="xavier", ffn_init_source="wangqiangneu/dlcl (fairseq 0.5) fairseq/models/dlcl_transformer.py: Linear() is xavier_uniform, zero bias",
                qkv_bias="zero", lm_final_norm=False),
        Variant("t_fixup", "T-Fixup", "Huang et al. 2020", pre_norm=False, post_norm=False,
                b2t="none", residual="identity", dlcl=False, final_norm=False, init="t_fixup", warmup=False,
                ffn_init="xavier", ffn_init_source="layer6ai-labs/T-Fixup fairseq/modules/transformer_layer.py: Linear() is xavier_uniform, zero bias"),
        Variant("deepnet", "DeepNet", "Wang et al. 2022", pre_norm=False, post_norm=True,
                b2t="none", residual="deepnet_alpha", dlcl=False, final_norm=False, init="deepnet", warmup=True,
                ffn_init="torch", ffn_init_source="Wang et al. 2022, Fig. 2 pseudo-code: xavier_normal_(w, gain=beta) (torchscale instead keeps nn.Linear's init and divides by 1/beta: docs/fidelity.md)"),
        Variant("admin", "Admin", "Liu et al. 2020", pre_norm=False, post_norm=True,
                b2t="none", residual="admin_omega", dlcl=False, final_norm=False, init="default", warmup=True,
                ffn_init="xavier", ffn_init_source="LiyuanLucasLiu/Transformer-Clinic fairseq/modules/transformer_layer.py: Linear() is xavier_uniform, zero bias",
                qkv_bias="zero"),
        # -- beyond the paper (the extension table) ------------------------------------------------------------
        Variant("b2t_2023", "B2T, 2023 init", "takase/b2t_connection commit 4d80167", pre_norm=False,
                post_norm=True, b2t="with_ln", residual="identity", dlcl=False, final_norm=False,
                init="b2t_depth_scaled", warmup=True, ffn_init="torch", ffn_init_source=FORK),
        Variant("peri_ln", "Peri-LN", "Kim et al. 2025; Sandwich-LN, Ding et al. 2021", pre_norm=True,
                post_norm=False, b2t="none", residual="identity", dlcl=False, final_norm=True, init="default",
                warmup=True, ffn_init="torch", ffn_init_source=FORK, out_norm=True),
        Variant("residual", "ResiDual", "Xie et al. 2023", pre_norm=False, post_norm=True, b2t="none",
                residual="identity", dlcl=False, final_norm=True, init="default", warmup=True, ffn_init="torch",
                ffn_init_source="microsoft/ResiDual resi_dual/resi_dual_layers.py (fairseq's TransformerEncoderLayerBase: nn.Linear)",
                dual_stream=True),
        Variant("mix_ln", "Mix-LN", "Li et al. 2025", pre_norm=True, post_norm=False, b2t="none",
                residual="identity", dlcl=False, final_norm=True, init="default", warmup=True, ffn_init="torch",
                ffn_init_source=FORK, post_ln_fraction=0.25,
                note="Post-LN in the lowest floor(0.25 N) layers of each stack, encoder and decoder each (1 of 6 at "
                     "6L; the official scripts give an integer count)"),
        Variant("dyt_pre", "DyT (Pre-LN)", "Zhu et al. 2025", pre_norm=True, post_norm=False, b2t="none",
                residual="identity", dlcl=False, final_norm=True, init="default", warmup=True, ffn_init="torch",
                ffn_init_source=FORK, norm="dyt"),
        Variant("dyt_post", "DyT (Post-LN)", "Zhu et al. 2025", pre_norm=False, post_norm=True, b2t="none",
                residual="identity", dlcl=False, final_norm=False, init="default", warmup=True, ffn_init="torch",
                ffn_init_source=FORK, norm="dyt",
                note="no official counterpart: DyT's code (jiachenzhu/DyT) is Pre-LN only"),
        Variant("rezero", "ReZero", "Bachlechner et al. 2020", pre_norm=False, post_norm=False, b2t="none",
                residual="rezero", dlcl=False, final_norm=False, init="default", warmup=True, ffn_init="torch",
                ffn_init_source=FORK),
    )
}
PAPER = ("post_ln", "pre_ln", "b2t", "b2t_noln", "dlcl", "t_fixup", "deepnet", "admin")
EXTENSION = ("b2t_2023", "peri_ln", "residual", "mix_ln", "dyt_pre", "dyt_post", "rezero")


def get_variant(name: str) -> Variant:
    if name not in VARIANTS:
        raise KeyError(f"unknown variant {name!r}; expected one of {', '.join(VARIANTS)}")
    return VARIANTS[name]


# Derived constants: computed from depth next to the equation they come from.

def b2t_noln_alpha(num_layers: int) -> float:
    """Appendix D, eq. 7: alpha = min(N/12, N^-0.15), N the depth of this stack."""
    return min(num_layers / 12.0, num_layers ** -0.15)


def b2t_noln_beta(d_model: int) -> float:
    """Appendix D, eq. 8: beta = d^-0.2."""
    return d_model ** -0.2


def deepnet_constants(encoder_layers: int, decoder_layers: int) -> dict[str, float]:
    """DeepNet (Wang et al. 2022, Table 1/Fig. 2): residual alpha and init gain beta per stack.

    Encoder-decoder with N encoder and M decoder layers; decoder-only (encoder_layers == 0) with N layers.
    """
    n, m = encoder_layers, decoder_layers
    if n == 0:
        return {"decoder_alpha": (2 * m) ** 0.25, "decoder_beta": (8 * m) ** -0.25}
    return {
        "encoder_alpha": 0.81 * (n ** 4 * m) ** (1 / 16),
        "encoder_beta": 0.87 * (n ** 4 * m) ** (-1 / 16),
        "decoder_alpha": (3 * m) ** 0.25,
        "decoder_beta": (12 * m) ** -0.25,
    }


# Constants of the newer methods, each beside its source.

DYT_ALPHA_INIT = 0.5
"""DyT's alpha at initialisation: jiachenzhu/DyT dynamic_tanh.py, alpha_init_value=0.5 (the paper's default for
models other than LLMs)."""


def mix_ln_post_layers(fraction: float, num_layers: int) -> int:
    """Mix-LN (Li et al. 2025): Post-LN in the lowest floor(alpha * L) layers, alpha = 0.25 their default."""
    return int(fraction * num_layers)


def b2t_2023_scale(num_layers: int) -> float:
    """The authors' 2023 init: every weight of a B2T layer times N^-0.5, N the layers of its stack."""
    return num_layers ** -0.5
