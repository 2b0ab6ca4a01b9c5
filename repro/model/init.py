"""Per-variant initialisation applied after a model is built (the default fairseq init lives in the modules).

- T-Fixup (Huang et al. 2020): depth-scaled Xavier init so that no LayerNorm and no warmup are needed.
- DeepNet (Wang et al. 2022): xavier_normal with gain beta on FFN and value/output projections.
- Admin (Liu et al. 2020): omega set by a profiling forward pass, saved beside the run and reused.
- The authors' 2023 B2T rescaling (the `b2t_2023` variant, or opt-in on the paper's B2T rows): every layer weight
  times N^-0.5.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from torch import nn

from repro.model.attention import MultiheadAttention
from repro.model.block import Residual
from repro.model.stack import LayerStack
from repro.model.variants import b2t_2023_scale, deepnet_constants


def _stacks(model: nn.Module) -> dict[str, LayerStack]:
    return {name: getattr(model, name) for name in ("encoder", "decoder")
            if isinstance(getattr(model, name, None), LayerStack) and getattr(model, name).num_layers > 0}


def _value_and_output(attn: MultiheadAttention) -> list[torch.Tensor]:
    return [attn.q_k_v_weights()[2], attn.out_proj.weight]


@torch.no_grad()
def t_fixup_init(model: nn.Module, embeddings: list[nn.Embedding]) -> None:
    """embeddings: [shared or encoder embedding, (separate decoder embedding)]."""
    stacks = _stacks(model)
    n_e = stacks["encoder"].num_layers if "encoder" in stacks else 0
    n_d = stacks["decoder"].num_layers
    scales = {"encoder": 0.67 * n_e ** -0.25 if n_e else 1.0, "decoder": (9 * n_d) ** -0.25}
    for name, stack in stacks.items():
        for layer in stack.layers:
            attns = [layer.self_attn] + ([layer.cross_attn] if layer.cross_attention else [])
            for attn in attns:
                q, k, v = attn.q_k_v_weights()
                nn.init.xavier_uniform_(q, gain=1 / math.sqrt(2))
                nn.init.xavier_uniform_(k, gain=1 / math.sqrt(2))
                nn.init.xavier_uniform_(v, gain=1.0)
                nn.init.xavier_uniform_(attn.out_proj.weight)
                for w in _value_and_output(attn):
                    w.mul_(scales[name])
            for fc in (layer.ffn.fc1, layer.ffn.fc2):
                nn.init.xavier_uniform_(fc.weight)
                fc.weight.mul_(scales[name])
    # Token embeddings N(0, d^-1/2) scaled by (9 N_e)^-1/4; a separate decoder embedding by (9 N_d)^-1/4.
    # With shared embeddings the official code keeps the encoder's factor.
    factors = [(9 * n_e) ** -0.25 if n_e else (9 * n_d) ** -0.25, (9 * n_d) ** -0.25]
    for emb, factor in zip(embeddings, factors):
        nn.init.normal_(emb.weight, 0.0, emb.embedding_dim ** -0.5)
        emb.weight.mul_(factor)
        if emb.padding_idx is not None:
            emb.weight[emb.padding_idx].zero_()


@torch.no_grad()
def deepnet_init(model: nn.Module) -> None:
    stacks = _stacks(model)
    n_e = stacks["encoder"].num_layers if "encoder" in stacks else 0
    consts = deepnet_constants(n_e, stacks["decoder"].num_layers)
    for name, stack in stacks.items():
        beta = consts[f"{name}_beta"]
        for layer in stack.layers:
            attns = [layer.self_attn] + ([layer.cross_attn] if layer.cross_attention else [])
            for attn in attns:
                q, k, v = attn.q_k_v_weights()
                nn.init.xavier_normal_(q, gain=1.0)
                nn.init.xavier_normal_(k, gain=1.0)
                nn.init.xavier_normal_(v, gain=beta)
                nn.init.xavier_normal_(attn.out_proj.weight, gain=beta)
            for fc in (layer.ffn.fc1, layer.ffn.fc2):
                nn.init.xavier_normal_(fc.weight, gain=beta)


@torch.no_grad()
def b2t_depth_scaled_init(model: nn.Module) -> None:
    """The authors' 2023 code (takase/b2t_connection commit 4d80167, not in the 2022 paper): every non-LN weight
    matrix of a layer times N^-0.5, N the layers of its stack."""
    for stack in _stacks(model).values():
        factor = b2t_2023_scale(stack.num_layers)
        for layer in stack.layers:
            for module in layer.modules():
                if isinstance(module, nn.Linear):
                    module.weight.mul_(factor)


def apply_variant_init(model: nn.Module, embeddings: list[nn.Embedding], b2t_depth_scaled: bool = False) -> None:
    init = model.variant.init
    if init == "t_fixup":
        t_fixup_init(model, embeddings)
    elif init == "deepnet":
        deepnet_init(model)
    elif init == "b2t_depth_scaled":
        b2t_depth_scaled_init(model)
    if b2t_depth_scaled:
        if model.variant.b2t == "none" or init == "b2t_depth_scaled":
            raise ValueError(f"b2t_depth_scaled_init applies to the paper's B2T variants, not {model.variant.name}")
        b2t_depth_scaled_init(model)


# -- Admin ---------------------------------------------------------------------------------------------------

def admin_residuals(model: nn.Module) -> dict[str, list[Residual]]:
    """Admin's residual modules per stack, in forward order (self-attn, cross-attn, FFN of each layer)."""
    out = {}
    for name, stack in _stacks(model).items():
        out[name] = [m for m in stack.modules() if isinstance(m, Residual) and m.kind == "admin_omega"]
    return out


@torch.no_grad()
def admin_profile(model: nn.Module, run_forward) -> dict[str, list[list[float]]]:
    """One profiling forward pass (`run_forward()` runs the model on a training batch) sets every omega.

    Walking the sublayers in order with a running scale r = 1 per stack: omega_i = r, then
    r = sqrt(Var(x * omega_i) + Var(F_i(x))), in training mode. Returns the omegas, to be saved beside the run
    (the pass draws dropout masks, so the run's seed fixes the profile).
    """
    was_training = model.training
    # Training mode, dropout on: the official profile is one training update (Transformer-Clinic's
    # `--init-type adaptive-profiling` run), and dropout's extra variance gives larger omegas than eval mode.
    model.train()
    residuals = admin_residuals(model)
    for stack_residuals in residuals.values():
        state = {"r": 1.0}
        for r in stack_residuals:
            r.admin_profile = state
    try:
        run_forward()
    finally:
        for stack_residuals in residuals.values():
            for r in stack_residuals:
                r.admin_profile = None
        model.train(was_training)
    return {name: [r.omega.tolist() for r in rs] for name, rs in residuals.items()}


def save_admin_profile(profile: dict, path: Path) -> None:
    from repro.files import atomic_write_text
    atomic_write_text(path, json.dumps(profile))


@torch.no_grad()
def load_admin_profile(model: nn.Module, path: Path) -> None:
    from repro.files import read_json
    profile = read_json(path)
    for name, rs in admin_residuals(model).items():
        if len(profile.get(name, [])) != len(rs):
            raise ValueError(f"{path}: Admin profile has {len(profile.get(name, []))} {name} sublayers, "
                             f"the model {len(rs)}")
        for r, omega in zip(rs, profile[name]):
            r.omega.copy_(torch.tensor(omega))
