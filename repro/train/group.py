"""Seeds trained together (`lnrepro train RECIPE --seeds 1-8`): one model whose parameters carry a leading member
dimension, one forward, backward and Adam step for all members.

A reduced-scale model is small (d_model 128): on a GPU one run launches thousands of kernels that each fill a sliver
of the chip, and on a CPU one run's matrix products are too small to keep two cores busy. Stacking the members'
parameters turns every product into a batched one over the members, so the launches and the per-operator overhead
are paid once for the group.

The stacking is `torch.func`'s: `stack_module_state` stacks the members' parameters, `vmap` maps
`functional_call` of one model over them. So the model code (repro/model/) is the same code a standalone run calls,
and knows nothing of groups; batched layers written by hand would need a second model. Each member:
- starts from the weights its seed's standalone run starts from (each member is built as that run builds its
  model, then stacked);
- sees its seed's batches in its seed's order: a step's batches, one per member, are padded to a common shape with
  rows and columns that are padding everywhere (their targets are padding, so they add exactly nothing to the loss
  or the gradients);
- has its own loss normalisation, gradient clipping, learning rate and warmup (members may differ in optim.lr and
  optim.warmup_updates, for calibration grids), and Adam state: Adam is elementwise, so one step over the stacked
  tensors is each member's step, with the learning rate a per-member factor;
- fails on its own: a member the failure rule stops is removed from the stack and the others go on.
What is not the standalone run's: the random streams (dropout masks, SpecAugment) are the group's, so with dropout
a member's run is another draw of its seed's run, not the same one.
"""

from __future__ import annotations

import copy
import math

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.func import functional_call, stack_module_state, vmap

from repro.config import ResolvedRecipe
from repro.data.text import EOS, PAD
from repro.train.optim import label_smoothed_nll, make_optimizer
from repro.train.tasks import autocast, batch_output, lm_nll, to_device

# The settings in which a group's members may differ; everything else is one recipe.
MEMBER_KEYS = (("train", "seed"), ("optim", "lr"), ("optim", "warmup_updates"))
# Not ASR: its convolutional front end reads past a row's last frame, so frames added to pad a batch change the edge
# of a shorter row's output.
GROUP_TASKS = ("mt", "summarization", "lm")
GROUP_PRECISIONS = ("fp32", "bf16")  # fp16's loss scaler skips a step for all members at once


def check_group(recipes: list[ResolvedRecipe], world: int, cuda_graphs: bool) -> None:
    """Raise a one-line ValueError where these runs cannot train as one group."""
    first = recipes[0].recipe
    why = None
    if world > 1:
        why = f"trains in one process (this run has {world})"
    elif cuda_graphs:
        why = "does not replay CUDA graphs: train without --cuda-graphs"
    elif first.task not in GROUP_TASKS:
        why = f"supports tasks {', '.join(GROUP_TASKS)}, not {first.task}: train its seeds one by one"
    elif first.train.precision not in GROUP_PRECISIONS:
        why = f"supports train.precision {' and '.join(GROUP_PRECISIONS)}, not {first.train.precision}"
    elif first.train.compile:
        why = "does not compile: set train.compile=false"
    if why:
        raise ValueError(f"grouped training {why}")
    common = _without_member_keys(first)
    for res in recipes[1:]:
        if _without_member_keys(res.recipe) != common:
            raise ValueError(f"grouped training: {res.path} at scale {res.scale} differs from {recipes[0].path} in "
                             f"more than {', '.join('.'.join(k) for k in MEMBER_KEYS)}; train them apart")


def _without_member_keys(recipe) -> dict:
    d = recipe.to_dict()
    for section, key in MEMBER_KEYS:
        d[section] = {k: v for k, v in d[section].items() if k != key}
    return d


def pad_rows(batches: list[dict], device) -> dict:
    """The members' batches of one step as one batch with a leading member dimension: each tensor padded to the
    largest shape. Added columns are PAD tokens; added rows are sentences whose targets are all padding, with one
    </s> as source and decoder input so that attention always has a key. Neither adds to a loss or a gradient."""
    out = {}
    for key in ("src", "prev", "tokens", "target"):
        if key not in batches[0]:
            continue
        parts = [b[key] for b in batches]
        shape = [max(p.shape[i] for p in parts) for i in range(parts[0].dim())]
        padded = parts[0].new_full((len(parts), *shape), PAD)
        for g, p in enumerate(parts):
            padded[(g, *(slice(0, n) for n in p.shape))] = p
            if key != "target":
                padded[g, p.shape[0]:, 0] = EOS
        out[key] = padded
    return to_device(out, device)


def attention_kernels():
    """Attention through the math kernel, whose matrix products and softmax batch over the members under vmap. The
    fused kernels have batching rules for some of their forwards only (not the fused CPU kernel; not the
    memory-efficient CUDA kernel's backward: pytorch/pytorch#117016), and vmap runs an operator without one member by
    member. At the reduced scales' short sequences the attention matrices are small."""
    return sdpa_kernel(SDPBackend.MATH)


class GroupEngine:
    """The update, validation and state of a group's members. Member i of the lists given is row i of every
    stacked tensor until `drop` removes rows."""

    def __init__(self, models: list[torch.nn.Module], optimizer_states: list[dict | None],
                 recipes: list[ResolvedRecipe], device: torch.device):
        self.recipes = [res.recipe for res in recipes]
        self.r, self.device = self.recipes[0], device
        first = models[0]
        # which tensor a state-dict key names (tied weights appear under several keys, stacked once)
        names = {id(t): n for n, t in [*first.named_parameters(), *first.named_buffers()]}
        self.state_keys = {k: names[id(t)] for k, t in first.state_dict(keep_vars=True).items()}
        self.param_names = [n for n, _ in first.named_parameters()]
        self.template = copy.deepcopy(first).to("meta")
        params, buffers = stack_module_state(models)
        self.params = {n: params[n].detach().to(device).requires_grad_(True) for n in self.param_names}
        self.buffers = {n: b.to(device) for n, b in buffers.items()}
        # Adam (torch.optim.Adam's arithmetic, fairseq's L2 weight decay), its moments stacked like the parameters
        self.optimizer_form = make_optimizer(first.parameters(), self.r.optim.lr, self.r.optim.betas,
                                             self.r.optim.eps, self.r.optim.weight_decay).state_dict()["param_groups"]
        self.lrs = [res.recipe.optim.lr for res in recipes]
        self.adam_step, self.stepped = 0, set()  # Adam's steps so far; the parameters it has state for
        self.exp_avg = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.exp_avg_sq = {n: torch.zeros_like(p) for n, p in self.params.items()}
        for g, saved in enumerate(optimizer_states):
            if saved:
                self._load_adam(g, saved)
        self.output = vmap(self._member_output, in_dims=(0, 0, 0), randomness="different")
        self.output_shared = vmap(self._member_output, in_dims=(0, 0, None), randomness="error")

    @property
    def size(self) -> int:
        return next(iter(self.params.values())).shape[0]

    def _member_output(self, params: dict, buffers: dict, batch: dict) -> torch.Tensor:
        return batch_output(lambda *args: functional_call(self.template, (params, buffers), args), batch, self.r.task)

    def _losses(self, batch: dict, shared: bool = False, epsilon: float | None = None) -> torch.Tensor:
        """(members, 2): each member's summed loss and NLL over the batch (its own rows, or with `shared` one batch
        for all). The loss is taken on the stacked logits, outside vmap: log-softmax's backward under vmap is
        several times slower on the CPU."""
        output = (self.output_shared if shared else self.output)(self.params, self.buffers, batch)
        target = batch["target"].expand(self.size, *batch["target"].shape) if shared else batch["target"]
        if self.r.task == "lm":  # no label smoothing: the loss is the NLL
            nll = lm_nll(output, target, members=True)
            return torch.stack([nll, nll], dim=1)
        eps = self.r.optim.label_smoothing if epsilon is None else epsilon
        return torch.stack(label_smoothed_nll(output, target, eps, PAD, members=True), dim=1)

    def update(self, groups: list[list], lrs: list[float], collate) -> list[dict]:
        """One update of every member: `groups[i]` the batches (index arrays) member i's standalone run takes in this
        update, `lrs[i]` its learning rate. Returns each member's loss, NLL and target-token sums and gradient
        norm, as a standalone run's update does."""
        for p in self.params.values():
            p.grad = None
        sums = torch.zeros(self.size, 2, dtype=torch.float64, device=self.device)
        tokens = [0] * self.size
        self.template.train()
        for j in range(len(groups[0])):
            batches = [collate(g[j]) for g in groups]
            for i, b in enumerate(batches):
                tokens[i] += int(b["ntokens"])
            with autocast(self.device, self.r.train.precision), attention_kernels():
                out = self._losses(pad_rows(batches, self.device))
            out[:, 0].sum().backward()
            sums += out.detach().double()
        ntok = torch.tensor(tokens, dtype=torch.float32, device=self.device)
        norms = self._normalise_and_clip(ntok.clamp(min=1.0))
        self.lrs = list(lrs)
        self._adam(torch.tensor(lrs, dtype=torch.float32, device=self.device))
        rows = torch.cat([sums, norms.double().view(-1, 1)], dim=1).tolist()  # the update's one host-device sync
        return [{"loss": loss, "nll": nll, "tokens": t, "grad_norm": norm, "skipped": False}
                for (loss, nll, norm), t in zip(rows, tokens)]

    def _per_member(self, v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        return v.view(-1, *(1,) * (like.dim() - 1))

    def _normalise_and_clip(self, tokens: torch.Tensor) -> torch.Tensor:
        """repro.train.optim.normalise_and_clip for each member: its gradients divided by its target tokens, their
        norm clipped to clip_norm as torch's clip_grad_norm_ does. Returns the norms before clipping."""
        grads = [p.grad for p in self.params.values() if p.grad is not None]
        torch._foreach_mul_(grads, [self._per_member(1.0 / tokens, g) for g in grads])
        norms = torch.linalg.vector_norm(torch.stack([g.flatten(1).norm(dim=1) for g in grads]), dim=0)
        clip = self.r.optim.clip_norm
        if clip > 0:
            coef = (clip / (norms + 1e-6)).clamp(max=1.0)
            torch._foreach_mul_(grads, [self._per_member(coef, g) for g in grads])
        return norms

    @torch.no_grad()
    def _adam(self, lrs: torch.Tensor) -> None:
        """torch.optim.Adam's step (its single-tensor arithmetic) on the stacked tensors, lr per member."""
        (beta1, beta2), eps, wd = self.r.optim.betas, self.r.optim.eps, self.r.optim.weight_decay
        self.adam_step += 1
        names = [n for n, p in self.params.items() if p.grad is not None]
        self.stepped.update(names)
        params = [self.params[n] for n in names]
        grads = [p.grad for p in params]
        if wd:
            grads = torch._foreach_add(grads, params, alpha=wd)
        exp_avg, exp_avg_sq = [self.exp_avg[n] for n in names], [self.exp_avg_sq[n] for n in names]
        torch._foreach_lerp_(exp_avg, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sq, beta2)
        torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1 - beta2)
        bias1, bias2 = 1 - beta1 ** self.adam_step, 1 - beta2 ** self.adam_step
        denom = torch._foreach_sqrt(exp_avg_sq)
        torch._foreach_div_(denom, math.sqrt(bias2))
        torch._foreach_add_(denom, eps)
        step = torch._foreach_div(exp_avg, denom)
        torch._foreach_mul_(step, [self._per_member(lrs / bias1, p) for p in params])
        torch._foreach_sub_(params, step)

    @torch.no_grad()
    def validate(self, data, max_tokens: int) -> list[float]:
        """Every member's mean NLL per target token over a split (repro.train.loop.validate), one pass for all."""
        from repro.data.batching import token_batches
        self.template.eval()
        total, tokens = torch.zeros(self.size, dtype=torch.float64, device=self.device), 0
        for idx in token_batches(data.sizes, max_tokens, seed=0, epoch=0, shuffle=False):
            batch = data.collate(idx)
            tokens += int(batch["ntokens"])
            shared = to_device({k: v for k, v in batch.items() if k not in ("ids", "ntokens")}, self.device)
            with autocast(self.device, self.r.train.precision), attention_kernels():
                total += self._losses(shared, shared=True, epsilon=0.0)[:, 1].double()
        self.template.train()
        return (total / max(tokens, 1)).tolist()

    def member_state(self, g: int) -> tuple[dict, dict]:
        """Member g's model and optimizer state, in the form a standalone run's checkpoint holds them."""
        stacked = {**self.params, **self.buffers}
        model = {k: stacked[n][g].detach().clone() for k, n in self.state_keys.items()}
        state = {}
        for i, n in enumerate(self.param_names):
            if n in self.stepped:
                state[i] = {"step": torch.tensor(float(self.adam_step)), "exp_avg": self.exp_avg[n][g].clone(),
                            "exp_avg_sq": self.exp_avg_sq[n][g].clone()}
        groups = copy.deepcopy(self.optimizer_form)
        groups[0]["lr"] = self.lrs[g]  # as a standalone run leaves it: the last update's learning rate
        return model, {"state": state, "param_groups": groups}

    def _load_adam(self, g: int, saved: dict) -> None:
        for i, n in enumerate(self.param_names):
            s = saved["state"].get(i)
            if s is not None:
                self.adam_step = int(s["step"])
                self.stepped.add(n)
                self.exp_avg[n][g] = s["exp_avg"].to(self.device)
                self.exp_avg_sq[n][g] = s["exp_avg_sq"].to(self.device)

    def counts(self) -> None:
        """A group replays no CUDA graphs: nothing to count (the loop's SingleEngine has its graphs')."""
        return None

    def drop(self, keep: list[bool]) -> None:
        """Remove the members whose `keep` is False (failed): the others go on as a smaller group."""
        rows = torch.tensor([i for i, k in enumerate(keep) if k], dtype=torch.long, device=self.device)
        self.params = {n: p.detach()[rows].requires_grad_(True) for n, p in self.params.items()}
        self.buffers = {n: b[rows] for n, b in self.buffers.items()}
        self.exp_avg = {n: t[rows] for n, t in self.exp_avg.items()}
        self.exp_avg_sq = {n: t[rows] for n, t in self.exp_avg_sq.items()}
        self.recipes = [r for r, k in zip(self.recipes, keep) if k]
        self.lrs = [lr for lr, k in zip(self.lrs, keep) if k]
