"""fairseq Transformer parameters under lnrepro's names (fairseq 0.8 to 0.12, the authors' fork and Admin's included).

fairseq 0.9 on keeps the query, key and value projections apart (`self_attn.q_proj`, `k_proj`, `v_proj`; the
decoder's `encoder_attn`), lnrepro fuses them (`self_attn.qkv_proj`, `cross_attn.q_proj` and `kv_proj`), so those
are concatenated in that order; fairseq 0.5-0.8 fuse them too (`in_proj_weight`, rows q, k, v), and fairseq 0.5
numbers a layer's norms (`layer_norms.0`, `.1`, the decoder's `.2`, in the order of its sublayers). Admin's
per-sublayer omegas (Transformer-Clinic: `attention_ratio_change`, `fc_ratio_change`; the decoder's
`self_ratio_change`, `encoder_ratio_change`) are lnrepro's `*_residual.omega`; DLCL's `history` (wangqiangneu/dlcl:
its weight matrix, L+1 x L+1 x 1, and the norms of the stored layers) is lnrepro's `dlcl`. A language model
(`transformer_lm`, adaptive input and softmax tied) maps onto lnrepro's LanguageModel: each band's embedding and
projection (`decoder.embed_tokens.embeddings.<i>.0`, `.1`) and the softmax's cluster logits (`head.class_proj`);
the softmax's other entries are the tied input matrices again. A layer's two (decoder: three) layer norms are `self_attn_layer_norm`,
`encoder_attn_layer_norm` and `final_layer_norm` in every placement; which of lnrepro's norm slots they fill depends on
the variant: before the sublayer (Pre-LN) or after the sum (Post-LN, and B2T, whose connection adds no parameter).
The shared embedding (`share_all_embeddings`) is one matrix; a stack's last norm (Pre-LN) is `encoder.layer_norm`.
The sinusoidal positions are computed, not stored. The mapping is linear, so it maps gradients too.
"""

from __future__ import annotations

import re

import torch

from repro.model.variants import get_variant

# not parameters: version stamps, the positions' placeholder, and fairseq 0.12's copies of an encoder layer's
# weights for its fused inference path (`in_proj_weight`, `fc1_weight`, ...: the same values as the layer's own)
_SKIP = re.compile(r"(^|\.)(version|_float_tensor)$|embed_positions|\.layers\.\d+\.(in_proj|out_proj|fc1|fc2)_(weight|bias)$")
_OMEGA = {"attention": "attn", "self": "attn", "encoder": "cross", "fc": "ffn"}
_EMBEDDINGS = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "decoder.output_projection.weight")


def from_fairseq(state: dict[str, torch.Tensor], variant: str) -> dict[str, torch.Tensor]:
    """A fairseq TransformerModel's state dict (or gradients by parameter name) as lnrepro's EncoderDecoder's for
    `variant`. A ValueError names a parameter the mapping does not know or that is missing."""
    v = get_variant(variant)
    slot = "pre" if v.pre_norm else "post"
    norms = {"self_attn_layer_norm": f"{slot}_attn_norm", "encoder_attn_layer_norm": f"{slot}_cross_norm",
             "final_layer_norm": f"{slot}_ffn_norm"}
    out, used = {}, set()
    adaptive = any(k.startswith("decoder.embed_tokens.embeddings.") for k in state)
    if not adaptive:
        embedding = next((state[k] for k in _EMBEDDINGS if k in state), None)
        if embedding is None:
            raise ValueError(f"no token embedding among {', '.join(_EMBEDDINGS)}")
        out["embed_tokens.weight"] = embedding
        used.update(k for k in _EMBEDDINGS if k in state)
    for key, t in state.items():
        if key in used or _SKIP.search(key):
            continue
        if not _map_special(key, t, norms, out):
            _map_layer(key, t, state, v, norms, out)
    for key in state:
        m = re.fullmatch(r"(encoder|decoder)\.layers\.(\d+)\.self_attn\.q_proj\.(weight|bias)", key)
        if m:
            prefix = f"{m[1]}.layers.{m[2]}.self_attn"
            out[f"{prefix}.qkv_proj.{m[3]}"] = torch.cat([_need(state, f"{prefix}.{p}_proj.{m[3]}") for p in "qkv"])
    return out


def _map_special(key: str, t: torch.Tensor, norms: dict[str, str], out: dict) -> bool:
    """Map a parameter of the layouts other than fairseq 0.9+'s plain layer (adaptive input and softmax, 0.8's fused
    projections, DLCL, 0.5's numbered norms, Admin's omega) into `out`; False where `key` is none of them."""
    m = re.fullmatch(r"decoder\.embed_tokens\.embeddings\.(\d+)\.([01])\.weight", key)
    if m:  # a band of the adaptive input: its embedding, its projection to d
        out[f"embed_tokens.{'embeddings' if m[2] == '0' else 'projections'}.{m[1]}.weight"] = t
        return True
    if key.startswith("decoder.adaptive_softmax."):
        if key == "decoder.adaptive_softmax.head.class_proj.weight":
            out["softmax.cluster_logits.weight"] = t
        elif not re.fullmatch(r"decoder\.adaptive_softmax\.(head\.word_proj|tail\.\d+\.[02])\.weight", key):
            raise ValueError(f"fairseq parameter {key!r}: an adaptive softmax lnrepro does not map (untied?)")
        return True  # the tied input matrices, mapped above
    m = re.fullmatch(r"(encoder|decoder)\.layers\.(\d+)\.(self_attn|encoder_attn)\.in_proj_(weight|bias)", key)
    if m:  # fairseq 0.8's fused projection
        prefix = f"{m[1]}.layers.{m[2]}"
        if m[3] == "self_attn":
            out[f"{prefix}.self_attn.qkv_proj.{m[4]}"] = t
        else:
            d = t.shape[0] // 3
            out[f"{prefix}.cross_attn.q_proj.{m[4]}"] = t[:d]
            out[f"{prefix}.cross_attn.kv_proj.{m[4]}"] = t[d:]
        return True
    m = re.fullmatch(r"(encoder|decoder)\.history\.(weight|layer_norms\.\d+\.weight|layer_norms\.\d+\.bias)", key)
    if m:  # DLCL's combination
        out[f"{m[1]}.dlcl.{'weights' if m[2] == 'weight' else m[2].replace('layer_norms', 'norms')}"] = (
            t.squeeze(-1) if m[2] == "weight" else t)
        return True
    m = re.fullmatch(r"(encoder|decoder)\.layers\.(\d+)\.layer_norms\.(\d)\.(weight|bias)", key)
    if m:  # fairseq 0.5's numbered norms, in sublayer order
        order = ["self_attn_layer_norm", "final_layer_norm"] if m[1] == "encoder" else \
            ["self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"]
        out[f"{m[1]}.layers.{m[2]}.{norms[order[int(m[3])]]}.{m[4]}"] = t
        return True
    m = re.fullmatch(r"(encoder|decoder)\.layers\.(\d+)\.(attention|self|encoder|fc)_ratio_change", key)
    if m:  # Admin's omega
        out[f"{m[1]}.layers.{m[2]}.{_OMEGA[m[3]]}_residual.omega"] = t
        return True
    return False


def _map_layer(key: str, t: torch.Tensor, state: dict, v, norms: dict[str, str], out: dict) -> None:
    """Map a plain layer's parameter (or a stack's final norm) into `out`; a ValueError names one lnrepro does not
    map."""
    m = re.fullmatch(r"(encoder|decoder)\.layers\.(\d+)\.(.+)\.(weight|bias)", key)
    if m is None:
        stack = re.fullmatch(r"(encoder|decoder)\.layer_norm\.(weight|bias)", key)
        if stack is None:
            raise ValueError(f"fairseq parameter {key!r}: not a Transformer parameter lnrepro maps")
        out[f"{stack[1]}.final_norm.{stack[2]}"] = t
        return
    side, layer, part, kind = m.groups()
    prefix = f"{side}.layers.{layer}"
    if part in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "encoder_attn.k_proj",
                "encoder_attn.v_proj"):
        return  # concatenated below, from the query's entry
    if part in norms:
        if not (v.pre_norm or v.post_norm):
            return  # never applied: T-Fixup's fork builds its decoder's encoder_attn_layer_norm regardless
        out[f"{prefix}.{norms[part]}.{kind}"] = t
    elif part in ("fc1", "fc2"):
        out[f"{prefix}.ffn.{part}.{kind}"] = t
    elif part in ("self_attn.out_proj", "encoder_attn.out_proj"):
        out[f"{prefix}.{'self_attn' if part.startswith('self') else 'cross_attn'}.out_proj.{kind}"] = t
    elif part == "encoder_attn.q_proj":
        out[f"{prefix}.cross_attn.q_proj.{kind}"] = t
        out[f"{prefix}.cross_attn.kv_proj.{kind}"] = torch.cat(
            [_need(state, f"{prefix}.encoder_attn.{p}_proj.{kind}") for p in "kv"])
    else:
        raise ValueError(f"fairseq parameter {key!r}: not a Transformer parameter lnrepro maps")


def _need(state: dict, key: str) -> torch.Tensor:
    if key not in state:
        raise ValueError(f"fairseq state has no {key!r}")
    return state[key]


def from_torchscale(state: dict[str, torch.Tensor], variant: str = "deepnet") -> dict[str, torch.Tensor]:
    """A torchscale EncoderDecoder's state dict (fairseq's layout, each layer's FFN under `ffn.`) as lnrepro's."""
    return from_fairseq({re.sub(r"\.ffn\.(fc[12])\.", r".\1.", k): v for k, v in state.items()}, variant)
