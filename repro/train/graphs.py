"""Training updates replayed as CUDA graphs (`lnrepro train --cuda-graphs`): the same arithmetic, fewer launches.

A mini model (d_model 128) on a GPU spends an update launching kernels, not computing: an 18L-18L update is a few
thousand small kernels, each launched from Python (one H200: 10 updates/s, three runs at once). A CUDA graph
launches a whole captured update at once. A graph replays fixed shapes, and batches cut by length come in few:
Multi30k's 2,048-token batches take 38 shapes in 8,000 updates, the Gigaword sample's 193 in 3,500. So each shape
is captured the second time it comes (its first update runs eagerly, which also warms up the libraries a capture
must not initialise) and replayed from then on; nothing is padded, so every update computes what the eager loop
computes.

The graph holds forward, backward, the division by the update's target tokens and gradient clipping. The
optimizer step stays outside (fused Adam, a few launches), after the host has read the gradient norm, as in the
eager loop: a non-finite norm skips it and fails the run. Gradients live in tensors allocated once and zeroed at
the start of every update, so every graph writes the same ones; parameters the first update leaves without a
gradient keep none, as the eager loop leaves them (Adam skips them). All graphs share one memory pool. torch's
notes allow that for graphs replayed one at a time in the order they were captured, since a later capture may put
its output where an earlier graph keeps temporaries; here the order varies, which is safe because each graph's one
output (four numbers) is read before any other graph runs, and inputs and gradients live outside the pool.
"""

from __future__ import annotations

import contextlib
import math

import torch

from repro.config import Recipe
from repro.data.text import PAD
from repro.train.tasks import batch_loss

GRAPH_TASKS = ("mt", "summarization")  # text in, text out; the LM's adaptive softmax picks rows by value (a sync)
MAX_GRAPHS = 256  # shapes past this many run eagerly (the Gigaword sample at mini has 193 in 3,500 updates)


def check_graphable(recipe: Recipe, device_type: str, world: int) -> None:
    """Raise a one-line ValueError where a run cannot replay its updates as CUDA graphs."""
    update_freq = max(recipe.optim.gpus_per_update // world, 1)
    why = None
    if device_type != "cuda":
        why = f"needs a CUDA device (this machine trains on the {device_type.upper()})"
    elif recipe.task not in GRAPH_TASKS:
        why = f"supports tasks {', '.join(GRAPH_TASKS)}, not {recipe.task}"
    elif world > 1 or update_freq > 1:
        why = (f"replays one batch per update in one process; this run has {world} processes and accumulates "
               f"{update_freq} batches per update (optim.gpus_per_update {recipe.optim.gpus_per_update})")
    elif recipe.train.precision != "fp32":
        why = f"runs fp32 updates, not train.precision {recipe.train.precision}"
    elif recipe.train.compile:
        why = "and train.compile are two ways to cut launches: choose one"
    if why:
        raise ValueError(f"--cuda-graphs {why}")


class GraphedUpdate:
    """One update's forward, backward, normalisation and clipping; `__call__` returns [loss, NLL, target tokens,
    gradient norm] (float64, on the device) with the gradients in the parameters' .grad, ready for the optimizer.

    With capture=False (a CPU) every update runs eagerly through the same code, which is how tests check it."""

    def __init__(self, model: torch.nn.Module, recipe: Recipe, capture: bool, max_graphs: int = MAX_GRAPHS):
        self.model, self.recipe, self.capture, self.max_graphs = model, recipe, capture, max_graphs
        self.params: list[torch.nn.Parameter] | None = None  # those with a gradient, fixed by the first update
        self.seen: set[tuple] = set()
        self.graphs: dict[tuple, tuple] = {}  # shape -> (graph, static batch, static output)
        self.pool = None
        self.replayed = self.eager = 0
        self.side = torch.cuda.Stream() if capture else None

    def counts(self) -> dict:
        """What a run's record keeps of how its updates were made."""
        return {"graphs": len(self.graphs), "replayed": self.replayed, "eager": self.eager}

    def _compute(self, batch: dict) -> torch.Tensor:
        loss, nll, _ = batch_loss(self.model, batch, self.recipe)
        loss.backward()
        if self.params is None:
            self.params = [p for p in self.model.parameters() if p.grad is not None]
        grads = [p.grad for p in self.params]
        # Counted on the device (the eager loop counts on the host): a graph cannot take a new host number.
        ntokens = batch["target"].ne(PAD).sum()
        torch._foreach_mul_(grads, (1.0 / ntokens.double().clamp(min=1.0)).float())  # as the eager loop rounds it
        clip = self.recipe.optim.clip_norm
        norm = torch.nn.utils.clip_grad_norm_(self.params, clip if clip > 0 else math.inf, foreach=True)
        return torch.stack([loss.detach().double(), nll.detach().double(), ntokens.double(), norm.double()])

    def _update(self, batch: dict) -> torch.Tensor:
        if self.params is None:
            self.model.zero_grad(set_to_none=True)
        else:
            torch._foreach_zero_([p.grad for p in self.params])
        return self._compute(batch)

    def __call__(self, batch: dict) -> torch.Tensor:
        key = tuple((k, tuple(v.shape)) for k, v in sorted(batch.items()) if torch.is_tensor(v))
        if key in self.graphs:
            graph, static, out = self.graphs[key]
            for k, v in batch.items():
                if torch.is_tensor(v):
                    static[k].copy_(v, non_blocking=True)
            graph.replay()
            self.replayed += 1
            return out
        if self.capture and key in self.seen and len(self.graphs) < self.max_graphs:
            static = {k: v.clone() if torch.is_tensor(v) else v for k, v in batch.items()}
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                out = self._update(static)
            self.pool = self.pool or graph.pool()
            self.graphs[key] = (graph, static, out)
            graph.replay()  # capturing records the update; replaying makes it
            self.replayed += 1
            return out
        self.seen.add(key)
        self.eager += 1
        # Eager updates run on a side stream, as a capture's warm-up must (torch.cuda.graphs' notes).
        stream = torch.cuda.stream(self.side) if self.side is not None else contextlib.nullcontext()
        if self.side is not None:
            self.side.wait_stream(torch.cuda.current_stream())
        with stream:
            out = self._update(batch)
        if self.side is not None:
            torch.cuda.current_stream().wait_stream(self.side)
        return out
