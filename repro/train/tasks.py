"""What differs between the four tasks during training: which data a split opens and how a batch's loss is summed.

Every loss function returns summed (loss, nll, ntokens) over the batch's real target tokens (frames are not
targets: for ASR the targets are the transcript's pieces).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from repro.config import Recipe
from repro.data.batching import ParallelData
from repro.data.text import PAD
from repro.train import output_loss
from repro.train.optim import label_smoothed_nll


def open_split(recipe: Recipe, corpus_dir: Path, split: str, train: bool = False):
    if recipe.task in ("mt", "summarization"):
        return ParallelData(corpus_dir, split, recipe.data.max_source_positions)
    if recipe.task == "lm":
        from repro.data.wikitext import LMBlocks
        return LMBlocks(corpus_dir, split, recipe.data.tokens_per_sample)
    if recipe.task == "asr":
        from repro.data.librispeech import SpeechData
        return SpeechData(corpus_dir, split, specaugment=train and recipe.data.specaugment,
                          max_frames=recipe.data.max_source_positions, time_p=recipe.data.specaugment_time_p)
    raise ValueError(f"unknown task {recipe.task!r}")


def batch_tokens(recipe: Recipe) -> int:
    """Token budget of one batch. An LM batch holds whole blocks: where Table 7's 1,024 tokens per GPU is less
    than the 3,072-token block, a batch is one block (fairseq cannot split a block either)."""
    if recipe.task == "lm":
        return max(recipe.data.max_tokens, recipe.data.tokens_per_sample)
    return recipe.data.max_tokens


def batch_loss(model, batch: dict, recipe: Recipe, epsilon: float | None = None):
    eps = recipe.optim.label_smoothing if epsilon is None else epsilon
    if recipe.task == "lm":
        nll = lm_nll(batch_output(model, batch, recipe.task), batch["target"])
        return nll, nll, int(batch["ntokens"])  # counted on the host by collate: no device sync
    if recipe.train.compile:
        loss, nll = label_smoothed_nll(batch_output(model, batch, recipe.task), batch["target"], eps, PAD)
    else:  # the loss takes the projection's place inside the forward, so DDP sees one forward
        loss, nll = model(batch["src"], batch["prev"], batch.get("src_lengths"),
                          output=output_loss.smoothed_nll(batch["target"], eps, PAD))
    return loss, nll, int(batch["ntokens"])


def batch_output(model, batch: dict, task: str) -> torch.Tensor:
    """The model on a batch: a sequence-to-sequence model's next-token logits (MT, summarisation, ASR), the language
    model's log-probability of each target (LanguageModel.forward)."""
    if task == "lm":
        return model(batch["tokens"], batch["target"])
    return model(batch["src"], batch["prev"], batch.get("src_lengths"))


def lm_nll(lp: torch.Tensor, target: torch.Tensor, members: bool = False) -> torch.Tensor:
    """Summed NLL of the non-pad targets from their log-probabilities; per member with `members`."""
    nll = -(lp * target.ne(PAD))
    return nll.flatten(1).sum(1) if members else nll.sum()


def autocast(device: torch.device, precision: str):
    """The context a forward runs in: none for fp32, else torch's autocast to bf16 or fp16."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def to_device(batch: dict, device) -> dict:
    return {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}
