"""Calibration v2.1 (2026-12-03), fixed with its tests before any run it decides. It keeps calibration v2's rule
(repro/calibration.py, calibration.choose: minimax regret among the settings where both shallow baselines learn, the
deepest Pre-LN learning too) and its records, and says which grid each task runs, and how far:

- A task whose two baselines and deepest Pre-LN all learned under its v1 regime (the judging rules' gate, on the
  committed records of its current recipes: a majority of each cell's seeds did not fail), and whose v2 grid has
  no recorded run, keeps its v1 regime: v2's 16 runs would cost more than the evidence they would replace. (MT.)
- A grid with runs recorded on the rule's date is finished as v2 states it, v2's gate included (`FINISHED_AS_V2`:
  Gigaword, decided; the language model, 12 of 16 runs).
- Otherwise the grid runs its tokens-x1 settings first, and its tokens-x4 settings only when no x1 setting is a
  candidate at which the deepest Pre-LN learns. (Speech.)
- Learned is the judging rules' gate (repro/judging.py): beside v2's failure and unigram-NLL tests, a run whose
  record holds its evaluation must beat the best constant output on the task's metric and, where measured, use its
  source. Calibration runs of the x1-first grids are evaluated as they end, so that the gate has their metrics.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from repro import calibration
from repro.calibration import CalibrationSpec, label
from repro.config import resolve
from repro.judging import judged_records, learned_nothing, references_for
from repro.references import load_references
from repro.results import rule_version

RULES_V2_1 = "calibration v2.1 of 2026-12-03 (repro/calibration_v2_1.py: decide)"
DATE = "2026-12-03"
FINISHED_AS_V2 = ("summarization", "lm")
"""Tasks (spec `task`) whose v2 grids had runs recorded on DATE: finished as v2 states them."""


def v1_learned(spec: CalibrationSpec, results_dir: Path) -> tuple[bool, str]:
    """Whether the task's two baselines and its deepest Pre-LN learned under the regime its recipes train (v1):
    each cell has committed records of its current recipe, and a majority of them did not fail under the judging
    rules in force. With the counts that say so."""
    records, _ = judged_records(results_dir, spec.scale)
    parts, ok = [], True
    for name in (*spec.baselines, spec.deep_pre_ln):
        recs = records.get(name, [])
        learned = sum(r["status"] == "completed" for r in recs)
        parts.append(f"{name} {learned} of {len(recs)} seeds")
        ok = ok and bool(recs) and learned * 2 > len(recs)
    return ok, ", ".join(parts)


def x1_first(spec: CalibrationSpec) -> bool:
    return spec.task not in FINISHED_AS_V2


def judged_runs(spec: CalibrationSpec, out_dir: Path, refs: dict | None) -> tuple[dict, dict]:
    """The collected runs as calibration.choose reads them, (status, reason, curve), with status and reason the judging
    rules' where a record holds its evaluation: a run that did not beat the constant output has failed."""

    def one(base: str):
        got = calibration.read_recorded(out_dir, base)
        if got is None:
            return None
        record, curve = got
        status, reason = record["status"], str(record.get("reason", ""))
        if status == "completed" and isinstance(record.get("metrics"), dict) and record["metrics"]:
            why = learned_nothing(record, refs)
            if why:
                status, reason = "failed", why
        return status, reason, curve
    runs = {st: got for st in spec.settings()
            if (got := {b: r for b in spec.baselines if (r := one(label(b, st)))})}
    deep = {st: r for st in spec.settings() if (r := one(label(spec.deep_pre_ln, st)))}
    return runs, deep


def v1_regime(spec: CalibrationSpec) -> dict:
    o = resolve(calibration.recipe_path(spec, spec.baselines[0]), spec.scale).recipe.optim
    return {"warmup_updates": o.warmup_updates, "lr": o.lr, "tokens_factor": o.gpus_per_update,
            "max_updates": o.max_updates}


def choose(spec: CalibrationSpec, runs: dict, unigram_nll: float, deep: dict, v1: tuple[bool, str]) -> dict:
    """The decision under v2.1 (see the module's docstring). `v1` is v1_learned's answer."""
    if not x1_first(spec):
        return calibration.choose(spec, runs, unigram_nll, deep)
    if not runs and v1[0]:
        return {"rules": RULES_V2_1, "settings": [], "choice": {**v1_regime(spec)}, "not_informative": None,
                "deep_needed": None, "kept_v1": f"both baselines and the deepest Pre-LN learned under the v1 regime "
                                                f"({v1[1]}) and the v2 grid has no recorded run"}
    x1 = dataclasses.replace(spec, tokens_factor=(1,))
    first = calibration.choose(x1, {st: r for st, r in runs.items() if st[2] == 1}, unigram_nll,
                                {st: r for st, r in deep.items() if st[2] == 1})
    first["rules"] = RULES_V2_1
    if first.get("incomplete") or first.get("choice") or first.get("deep_needed") or spec.tokens_factor == (1,):
        first["stage"] = "tokens x1"
        return first
    whole = calibration.choose(spec, runs, unigram_nll, deep)  # no x1 setting serves: the x4 settings run too
    whole.update({"rules": RULES_V2_1, "stage": "tokens x4: no x1 setting is a candidate at which "
                  f"{spec.deep_pre_ln} learns ({first['not_informative']})"})
    return whole


def settings_to_train(spec: CalibrationSpec, decision: dict) -> list[tuple[int, float, int]]:
    """The grid settings v2.1 trains now: none where v1 is kept, the x1 settings while they decide, else all."""
    if decision.get("kept_v1"):
        return []
    if x1_first(spec) and decision.get("stage") == "tokens x1":
        return [st for st in spec.settings() if st[2] == 1]
    return spec.settings()


def collected(spec: CalibrationSpec, out_dir: Path, results_dir: Path) -> tuple[dict, dict]:
    """The collected runs as v2.1 reads them: judged by the judging rules' gate in the x1-first grids, as v2
    recorded them in the grids finished as v2 states them."""
    if not x1_first(spec):
        return calibration.recorded(spec, out_dir)
    probe = {"recipe_name": spec.baselines[0], "scale": spec.scale}
    return judged_runs(spec, out_dir, references_for(probe, load_references(results_dir)))


def decision(spec: CalibrationSpec, out_dir: Path, results_dir: Path, got: tuple[dict, dict] | None = None) -> dict:
    """choose on the collected records (`got`: collected's answer, read here unless given), writing nothing."""
    runs, deep = got or collected(spec, out_dir, results_dir)
    v1 = v1_learned(spec, results_dir) if x1_first(spec) and not runs else (False, "")
    d = choose(spec, runs, calibration.unigram_nll_of(spec, results_dir), deep, v1)
    d.update({"task": spec.task, "scale": spec.scale, "spec": str(spec.path), "baselines": list(spec.baselines),
              "deep_pre_ln": spec.deep_pre_ln})
    return d


def outcome(spec: CalibrationSpec, d: dict) -> str:
    """A v2.1 decision in one line, with the rule version that made it (v2 for a grid finished as v2 states it)."""
    version = rule_version(str(d.get("rules") or RULES_V2_1))
    if d.get("kept_v1"):
        c = d["choice"]
        return (f"kept v1 ({version}): warmup {c['warmup_updates']:,}, lr {c['lr']:g}, "
                f"{c['max_updates']:,} updates; {d['kept_v1']}")
    waiting = d.get("stage") and not d.get("choice") and not d.get("not_informative")
    return f"{calibration.outcome(spec, d)} ({d['stage'] + ', ' if waiting else ''}{version})"


def decide(spec: CalibrationSpec, out_dir: Path, results_dir: Path) -> dict:
    """The decision on the collected records under the rule in force (calibration v2.1, which applies
    calibration.choose); a decision is written to out_dir/choice.json (kept, with when and where it was first made,
    while the records give the same one) with the curves in curves.png."""
    runs, deep = collected(spec, out_dir, results_dir)
    made = decision(spec, out_dir, results_dir, (runs, deep))
    if runs:  # the curves so far; nothing to draw before the first run
        calibration.plot(spec, runs, deep, made, out_dir / "curves.png", calibration.unigram_nll_of(spec, results_dir),
                         f"{made['rules']}\n{outcome(spec, made)}")
    if made.get("incomplete"):
        return made
    kept = calibration.kept_choice(out_dir / "choice.json", made)
    if kept is not None:
        return kept
    calibration.write_choice(out_dir / "choice.json", made)
    return made
