"""Adam, the inverse-square-root schedule and label-smoothed cross-entropy (fairseq's definitions)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def inverse_sqrt_lr(step: int, lr: float, warmup_updates: int, warmup_init_lr: float, warmup: bool = True,
                    decay_period: int = 4000) -> float:
    """Linear warmup from warmup_init_lr to lr over warmup_updates, then lr * sqrt(warmup_updates / step).

    Without warmup (T-Fixup, Huang et al. 2020; its repository's inverse_sqrt_nowarmup scheduler):
    lr * sqrt(P / (P + step)) with P = decay_period, which starts at lr and decays like the inverse square root.
    """
    if not warmup:
        return lr * math.sqrt(decay_period / (decay_period + step))
    if step < warmup_updates:
        return warmup_init_lr + (lr - warmup_init_lr) * step / warmup_updates
    return lr * math.sqrt(warmup_updates / max(step, 1))


def label_smoothed_nll(logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad: int, members: bool = False):
    """Summed (loss, nll) over non-pad targets; fairseq's label_smoothed_nll_loss
    (fairseq/criterions/label_smoothed_cross_entropy.py). Pad positions are zeroed, as there, not selected: a
    boolean selection would wait for the GPU to learn its size. With `members`, the first dimension is a group's
    member (repro/train/group.py) and the sums are per member."""
    lead = logits.shape[:1] if members else ()
    lprobs = F.log_softmax(logits.float(), dim=-1).view(*lead, -1, logits.size(-1))
    target = target.reshape(*lead, -1, 1)
    pad_mask = target.eq(pad)
    nll = -lprobs.gather(-1, target).masked_fill(pad_mask, 0.0)
    smooth = -lprobs.sum(dim=-1, keepdim=True).masked_fill(pad_mask, 0.0)
    eps_i = epsilon / (lprobs.size(-1) - 1)
    loss = (1.0 - epsilon - eps_i) * nll + eps_i * smooth
    if members:
        return loss.sum(dim=(1, 2)), nll.sum(dim=(1, 2))
    return loss.sum(), nll.sum()


def normalise_and_clip(params, tokens: torch.Tensor, clip_norm: float, world: int = 1) -> torch.Tensor:
    """Divide an update's summed gradients by its target tokens (`tokens`, a device scalar; times `world`, as DDP
    averaged them over its processes), then clip their norm (clip_norm 0: no clipping). Returns the norm before
    clipping, on the device."""
    params = list(params)
    torch._foreach_mul_([p.grad for p in params if p.grad is not None], (world / tokens.clamp(min=1.0)).float())
    return torch.nn.utils.clip_grad_norm_(params, clip_norm if clip_norm > 0 else math.inf)


def make_optimizer(params, lr: float, betas, eps: float, weight_decay: float) -> torch.optim.Adam:
    """torch's Adam (fairseq's Adam: L2 weight decay added to the gradient), its fused kernel on a GPU or a CPU: a
    few launches per step instead of several per parameter (on a CPU 4 against 21 ms a mini step, Intel Xeon), the
    same update up to rounding."""
    params = list(params)
    from repro.model import cpu_paths
    on_cpu = cpu_paths.ENABLED and all(p.device.type == "cpu" for p in params)  # one of the CPU's fast paths
    fused = True if params and (all(p.is_cuda for p in params) or on_cpu) else None  # None: torch's own choice
    return torch.optim.Adam(params, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, fused=fused)


def load_optimizer_state(optimizer: torch.optim.Adam, saved: dict) -> None:
    """Load a checkpoint's optimizer state but keep this optimizer's implementation: load_state_dict also restores
    the saved groups' `fused` and `foreach` flags, so a run checkpointed by an earlier lnrepro (torch's default
    implementation on a CPU) would otherwise go on with that one."""
    own = [{k: g[k] for k in ("fused", "foreach") if k in g} for g in optimizer.param_groups]
    optimizer.load_state_dict(saved)
    for group, flags in zip(optimizer.param_groups, own):
        group.update(flags)
