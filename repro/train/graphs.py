"""Training updates replayed as CUDA graphs (`lnrepro train --cuda-graphs`): the same arithmetic, fewer launches.

A mini model (d_model 128) on a GPU spends an update launching kernels, not computing: an 18L-18L update is a few
thousand small kernels, each launched from Python (one H200: 10 updates/s, three runs at once). A CUDA graph
launches a whole captured batch at once. A graph replays fixed shapes, and batches cut by length come in few:
Multi30k's 2,048-token batches take 38 shapes in 8,000 updates, the Gigaword sample's 193 in 3,500. So each shape
is captured the second time it comes (its first batch runs eagerly, which also warms up the libraries a capture
must not initialise) and replayed from then on; nothing is padded, so every update computes what the eager loop
computes.

A graph holds one batch's forward and backward: it adds the batch's gradients to .grad and its loss, NLL and
target tokens to one running sum, as the eager loop does batch by batch when an update accumulates several. Around
the batches, a few launches stay eager: zeroing the gradients and the sum first, then the division by the update's
target tokens and gradient clipping; the optimizer step follows once the host has read the gradient norm, as in the
eager loop (a non-finite norm skips it and fails the run). Gradients live in tensors allocated by the first update
and zeroed in place after that, so every graph adds into the same ones; parameters the first update leaves without
a gradient keep none, as the eager loop leaves them (Adam skips them). A graph's results all land in those
tensors, allocated outside the graphs, so the graphs can share one memory pool whatever order they replay in:
what lives in the pool is each replay's temporaries, dead when it ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import torch

from repro.config import Recipe
from repro.data.text import PAD
from repro.train.optim import normalise_and_clip
from repro.train.tasks import batch_loss

GRAPH_TASKS = ("mt", "summarization")  # text in, text out; the LM's adaptive softmax picks rows by value (a sync)
GRAPH_PRECISIONS = ("fp32", "bf16")  # fp16's loss scaler skips steps by a check on the host
MAX_GRAPHS = 256  # shapes past this many run eagerly (the Gigaword sample at mini has 193 in 3,500 updates)


def check_graphable(recipe: Recipe, device_type: str, world: int) -> None:
    """Raise a one-line ValueError where a run cannot replay its batches as CUDA graphs."""
    why = None
    if device_type != "cuda":
        why = f"needs a CUDA device (this machine trains on the {device_type.upper()})"
    elif recipe.task not in GRAPH_TASKS:
        why = f"supports tasks {', '.join(GRAPH_TASKS)}, not {recipe.task}"
    elif world > 1:
        why = f"trains in one process (this run has {world}: DDP's gradient hooks are not captured)"
    elif recipe.train.precision not in GRAPH_PRECISIONS:
        why = f"supports train.precision {' and '.join(GRAPH_PRECISIONS)}, not {recipe.train.precision}"
    elif recipe.train.compile:
        why = "and train.compile are two ways to cut launches: choose one"
    if why:
        raise ValueError(f"--cuda-graphs {why}")


class GraphedUpdate:
    """One update over its batches: forward and backward of each, normalisation and clipping. `__call__` returns
    [loss, NLL, target tokens, gradient norm] (float64, on the device) with the gradients in the parameters' .grad,
    ready for the optimizer.

    With capture=False (a CPU) every batch runs eagerly through the same code, which is how tests check it."""

    def __init__(self, model: torch.nn.Module, recipe: Recipe, capture: bool, max_graphs: int = MAX_GRAPHS):
        self.model, self.recipe, self.capture, self.max_graphs = model, recipe, capture, max_graphs
        self.params: list[torch.nn.Parameter] | None = None  # those with a gradient, fixed by the first update
        self.sums: torch.Tensor | None = None  # the update's loss, NLL and target tokens so far
        self.seen: set[tuple] = set()
        self.graphs: dict[tuple, tuple] = {}  # shape -> (graph, static batch)
        self.pool = None
        self.replayed = self.eager = 0
        self.side = torch.cuda.Stream() if capture else None

    def counts(self) -> dict:
        """What a run's record keeps of how its batches were computed."""
        return {"graphs": len(self.graphs), "replayed": self.replayed, "eager": self.eager}

    def _autocast(self, device_type: str):
        if self.recipe.train.precision == "fp32":
            return contextlib.nullcontext()
        # No cast cache: a graph must cast the weights again at each replay.
        return torch.autocast(device_type=device_type, dtype=torch.bfloat16, cache_enabled=False)

    def _accumulate(self, batch: dict) -> None:
        """One batch's forward and backward: its gradients added to .grad, its sums to self.sums."""
        with self._autocast(batch["target"].device.type):
            loss, nll, _ = batch_loss(self.model, batch, self.recipe)
        loss.backward()
        # Counted on the device (the eager loop counts on the host): a graph cannot take a new host number.
        ntokens = batch["target"].ne(PAD).sum()
        self.sums += torch.stack([loss.detach().double(), nll.detach().double(), ntokens.double()])

    def _batch(self, batch: dict) -> None:
        key = tuple((k, tuple(v.shape)) for k, v in sorted(batch.items()) if torch.is_tensor(v))
        if key in self.graphs:
            graph, static = self.graphs[key]
            for k, v in batch.items():
                if torch.is_tensor(v):
                    static[k].copy_(v, non_blocking=True)
            graph.replay()
            self.replayed += 1
            return
        # Captured only once the gradients exist: a capture must add into them, not allocate them.
        if self.capture and self.params is not None and key in self.seen and len(self.graphs) < self.max_graphs:
            static = {k: v.clone() if torch.is_tensor(v) else v for k, v in batch.items()}
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                self._accumulate(static)
            self.pool = self.pool or graph.pool()
            self.graphs[key] = (graph, static)
            graph.replay()  # capturing records the batch; replaying computes it
            self.replayed += 1
            return
        self.seen.add(key)
        self.eager += 1
        if self.side is None:
            self._accumulate(batch)
            return
        # Eager batches run on a side stream, as a capture's warm-up must (torch.cuda.graphs' notes).
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            self._accumulate(batch)
        torch.cuda.current_stream().wait_stream(self.side)

    def __call__(self, batches: Iterable[dict]) -> torch.Tensor:
        if self.params is None:
            self.model.zero_grad(set_to_none=True)
        else:
            torch._foreach_zero_([p.grad for p in self.params])
        for batch in batches:
            if self.sums is None:  # allocated once, outside every graph
                self.sums = torch.zeros(3, dtype=torch.float64, device=batch["target"].device)
            self._batch(batch)
        if self.params is None:
            self.params = [p for p in self.model.parameters() if p.grad is not None]
        norm = normalise_and_clip(self.params, self.sums[2], self.recipe.optim.clip_norm)  # as the eager loop
        out = torch.cat([self.sums, norm.double().view(1)])
        self.sums.zero_()  # for the next update
        return out
