"""The output projection and the label-smoothed loss as one step on the CPU, a few hundred target rows at a time.

The plain path writes the logits of a batch (2,048 targets x 8,000 words: 65 MB at mini), then log-softmax, the
loss's gathers and sums, and in the backward log-softmax's gradient, a zero fill and an addition each go over all
of them again. Here each chunk of rows is projected, turned into its loss and into its logits' gradient while it is
still in cache, and multiplied back into the gradients of the decoder states and of the output matrix; the
gradients are kept for the backward, which only scales them. Same loss (`optim.label_smoothed_nll`, fairseq's),
fp32 throughout, summed in another order: 184 against 114 ms forward and backward at the mini shape on an Intel
Xeon (benchmarks/README.md, "Where a mini step's time goes").
"""

from __future__ import annotations

import torch

from repro.model import cpu_paths
from repro.train.optim import label_smoothed_nll

CHUNK = 256  # rows: 256 x 8,000 logits (8 MB) was the fastest of 64-2,048 (Intel Xeon, 2 MB L2 per core)


def fused(h: torch.Tensor) -> bool:
    """Whether the chunks apply to the decoder states h: where the CPU paths do (cpu_paths.applies)."""
    return cpu_paths.applies(h)


class _ProjectedSmoothedNLL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, target, epsilon, pad, grad):
        vocab = weight.shape[0]
        eps_i = epsilon / (vocab - 1)
        a, b = 1.0 - epsilon - eps_i, eps_i  # loss = a * nll + b * smooth, as in label_smoothed_nll
        grad_h = torch.empty_like(h) if grad else None
        grad_wt = torch.zeros(weight.shape[1], vocab) if grad else None  # transposed: each product reads z in place
        loss, nll = h.new_zeros(()), h.new_zeros(())
        for s in range(0, h.shape[0], CHUNK):
            hc, t = h[s:s + CHUNK], target[s:s + CHUNK]
            z = cpu_paths.linear(hc, weight)  # inside forward: no graph, just the product
            keep = t.ne(pad).to(z.dtype)
            z_target = z.gather(1, t[:, None]).squeeze(1)
            z_sum = z.sum(1)
            top = z.amax(1)
            z.sub_(top[:, None]).exp_()  # z now holds exp(logits - top): softmax times its row sum
            total = z.sum(1)
            lse = top + total.log()
            nll_rows = (lse - z_target) * keep
            smooth_rows = (vocab * lse - z_sum) * keep  # minus the sum of the log-probabilities
            loss += (a * nll_rows + b * smooth_rows).sum()
            nll += nll_rows.sum()
            if grad:
                # d loss / d logit_j = (a + b V) p_j - a [j = target] - b on a kept row, 0 on a pad row
                z.mul_(((a + b * vocab) / total * keep)[:, None]).sub_((b * keep)[:, None])
                z.scatter_add_(1, t[:, None], (-a * keep)[:, None])
                grad_h[s:s + CHUNK] = cpu_paths.linear(z, weight.t())
                grad_wt.add_(cpu_paths.linear(hc.t(), z.t()))
        ctx.mark_non_differentiable(nll)
        ctx.save_for_backward(grad_h, grad_wt.t().contiguous() if grad else None)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss, _grad_nll):
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * grad_loss, grad_w * grad_loss, None, None, None, None


def smoothed_nll(target: torch.Tensor, epsilon: float, pad: int):
    """A model's `output` (EncoderDecoder.decode) that returns label_smoothed_nll(linear(h, weight), target, epsilon,
    pad), summed (loss, nll): in chunks where `fused(h)` (the nll then carries no gradient), else as written."""
    def output(h: torch.Tensor, weight: torch.Tensor):
        if fused(h):
            return projected_smoothed_nll(h, weight, target, epsilon, pad)
        return label_smoothed_nll(cpu_paths.linear(h, weight), target, epsilon, pad)
    return output


def projected_smoothed_nll(h: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, epsilon: float,
                           pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed (loss, nll) of label_smoothed_nll(linear(h, weight), target, epsilon, pad), in chunks."""
    grad = torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)  # no gradients to validate
    return _ProjectedSmoothedNLL.apply(h.reshape(-1, h.shape[-1]), weight, target.reshape(-1), epsilon, pad, grad)
