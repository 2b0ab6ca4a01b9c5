"""The model code's version: which form of a method a record's numbers come from.

A fix that changes what a recipe trains (an initialisation, where a norm sits, how many gates a layer has) leaves the
recipe and its hash as they were, so a record carries the model code's version beside the hash: for its variant, the
date of the newest change below that touched it. One comparison uses one version (repro/judging.py).
`tests/test_model_code.py` fails when a variant's outputs at a fixed seed change while its version did not.

Records written before they carried the version get it from their commit: the newest change whose commit is an
ancestor of theirs (git answers; where it cannot, the version is "unknown").
"""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass
from pathlib import Path

from repro.model.variants import VARIANTS


@dataclass(frozen=True)
class Change:
    date: str
    """The version this change starts: its date, and `.2` for a second commit of changes on one day."""
    commit: str
    """The commit that brought it: how records from before records carried the version are placed."""
    variants: tuple[str, ...]
    what: str


ALL = tuple(VARIANTS)
OLDER_FAIRSEQ = ("dlcl", "t_fixup", "admin")

CHANGES: tuple[Change, ...] = (
    Change("2026-11-23", "104c8c3", ALL, "the FFN initialised as each method's own code builds it, fairseq's "
           "end-of-sentence rule in beam search"),
    Change("2026-11-29", "fa84ff6", ALL, "positions start at fairseq's padding index + 1"),
    Change("2026-12-03", "", tuple(v for v in ALL if v not in OLDER_FAIRSEQ),
           "q/k/v biases keep nn.Linear's init, as fairseq 0.9 (the authors' fork) and torchscale leave them"),
    Change("2026-12-03", "", ("rezero",), "one ReZero gate per layer, shared by its sublayers (rztx.py)"),
    Change("2026-12-03", "", ("peri_ln",), "Peri-LN's output norm takes the dropped-out output (CogView)"),
    Change("2026-12-03", "", ("residual", "peri_ln", "mix_ln", "dyt_pre"),
           "a language model keeps the final norm its method's own LM has"),
    Change("2026-12-03.2", "", ("residual",), "ResiDual's dual-stream norm at eps 1e-7 (resi_dual.py)"),
    Change("2026-12-03.2", "", ("t_fixup",), "q/k/v biases keep nn.Linear's init, as T-Fixup's fairseq 0.9 fork "
           "leaves them"),
    Change("2026-12-03.2", "", ("admin",), "Admin's profile as Transformer-Clinic's: no position at padded places, "
           "np.var's population variance"),
)
BEFORE = "before " + CHANGES[0].date


def current(variant: str) -> str:
    """The version a run of this variant trains today."""
    return at(variant, CHANGES[-1].date)


def at(variant: str, epoch: str) -> str:
    """The version this variant had when the code as a whole was at `epoch` (a change's date, or BEFORE): the
    newest change up to then that touched it. Variants changed apart carry different versions at one epoch."""
    return max((c.date for c in CHANGES if variant in c.variants and c.date <= epoch), default=BEFORE)


def epochs() -> list[str]:
    """Every state of the model code, newest first: the changes' dates, then BEFORE."""
    return sorted({c.date for c in CHANGES}, reverse=True) + [BEFORE]


@functools.lru_cache(maxsize=None)
def _is_ancestor(older: str, commit: str) -> bool | None:
    try:
        r = subprocess.run(["git", "merge-base", "--is-ancestor", older, commit], capture_output=True, timeout=10,
                           cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return {0: True, 1: False}.get(r.returncode)


def at_commit(variant: str, commit: str) -> str:
    """The version a run of this variant trained at `commit` (a record from before records carried it)."""
    commit = str(commit or "").removesuffix("-dirty")
    version = BEFORE
    for c in CHANGES:
        if variant not in c.variants or not c.commit:
            continue
        known = _is_ancestor(c.commit, commit) if commit else None
        if known is None:
            return "unknown"
        if known:
            version = c.date
    return version


def of_record(record: dict) -> str:
    """A record's model-code version: the one it carries, else the one its commit had."""
    if record.get("model_code"):
        return str(record["model_code"])
    return at_commit(str(record.get("variant", "")), str(record.get("commit", "")))


def of_status(status: dict, variant: str) -> str:
    """A run's version from its status.json: that of its stretches of training where they agree (a stretch from
    before they carried it by its commit), 'mixed (a, b)' where a resume crossed a change."""
    parts = status.get("segments") or [status]
    seen = sorted({str(p.get("model_code") or at_commit(variant, p.get("commit", ""))) for p in parts})
    return seen[0] if len(seen) == 1 else f"mixed ({', '.join(seen)})"
