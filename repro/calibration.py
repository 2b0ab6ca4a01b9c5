"""Choosing the `mini` regime by a rule fixed before the runs, on the two standard baselines only.

For one task, a checked-in spec (recipes/calibration/<task>.yaml) names the two shallow baseline recipes (Post-LN,
Pre-LN), a grid of warmup lengths and learning rates, and a compute cap. Each grid setting is one long run per
baseline with validation every `validate_interval` updates; the inverse-square-root schedule does not depend on the
run length, so the curve up to any update L is the run of length L.

The rule (`choose`):
- a curve has converged at L when its best validation NLL up to L improved by less than `tolerance` (relative)
  over the last `window_fraction` of [0, L];
- a setting's length L_s is the first validation point after warmup at which both baselines have converged, if one
  exists within the cap; a setting where a baseline's run failed or never converged is out;
- the chosen setting has the lowest mean of the two baselines' best validation NLL up to L_s (ties: the shorter
  L_s, then the smaller warmup). The regime is that setting and max_updates = L_s.
- if no setting converges within the cap, there is no choice; the provisional regime is then the setting whose
  baselines have the lowest mean best validation NLL at the cap, with max_updates = the cap, marked as not
  converged (the cap was too small: calibrate again with a larger one).
- while any setting of the grid has not run, there is neither a choice nor a provisional regime: a choice among the
  settings that happened to finish first would be another rule. The curves so far are still drawn.
B2T and the other methods are never read. The records and curves are written under results/<scale>/calibration/.

Version 2 (`choose`, 2026-11-29; a spec with `rules: v2`) widens the grid to learning rate, warmup and tokens
per update, gates on "learned" (judging rules v2) and on the task's deepest Pre-LN cell, chooses by minimax
regret instead of the mean, and may find a task not informative at its scale. v1's choices stay as they were made.
Its runs train to convergence or the cap: a setting's two baseline runs are stopped once the rule has settled the
setting (`stop_settled`), since it reads nothing of them past the setting's length.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from repro.config import RecipeError
from repro.files import atomic_write_text
from repro.results import RecordError, check_record_slot, status_provenance
from repro.files import read_json, read_jsonl
from repro.provenance import git_commit, now


TASKS = ("mt", "gigaword", "wikitext103", "librispeech")
"""The tasks a regime is calibrated for, by their specs' names (recipes/calibration/v2/TASK.yaml)."""


@dataclass(frozen=True)
class CalibrationSpec:
    path: Path
    task: str
    scale: str
    baselines: tuple[str, ...]
    warmup_updates: tuple[int, ...]
    lr: tuple[float, ...]
    max_updates: int
    validate_interval: int
    window_fraction: float
    tolerance: float
    rules: str = "v1"                       # "v2": choose, with the two keys below
    deep_pre_ln: str | None = None          # v2: the task's deepest Pre-LN recipe, which the choice must let learn
    tokens_factor: tuple[int, ...] = (1,)   # v2: tokens per update, times the recipe's (by accumulation)

    def settings(self) -> list[tuple[int, float, int]]:
        """(warmup, lr, tokens factor) of every grid point, the order ties are broken in."""
        return [(w, lr, k) for k in self.tokens_factor for lr in self.lr for w in self.warmup_updates]


SPEC_KEYS = {"task": str, "scale": str, "baselines": list, "warmup_updates": list, "lr": list, "max_updates": int,
             "validate_interval": int, "window_fraction": float, "tolerance": float}
SPEC_KEYS_V2 = {"rules": str, "deep_pre_ln": str, "tokens_factor": list}  # a v2 spec has all three


def load_spec(path: Path) -> CalibrationSpec:
    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"{path}: calibration spec not found")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise RecipeError(f"{path}: not a valid YAML file ({type(e).__name__})") from None
    if not isinstance(raw, dict):
        raise RecipeError(f"{path}: top level must be a mapping of keys")
    v2 = raw.get("rules") == "v2"
    if "rules" in raw and not v2:
        raise RecipeError(f"{path}: rules: {raw['rules']!r} is not v2 (a v1 spec names no rules)")
    for key, tp in {**SPEC_KEYS, **(SPEC_KEYS_V2 if v2 else {})}.items():
        if key not in raw:
            raise RecipeError(f"{path}: {key}: missing")
        ok = isinstance(raw[key], (int, float)) and not isinstance(raw[key], bool) if tp is float else \
            isinstance(raw[key], tp) and not isinstance(raw[key], bool)
        if not ok:
            raise RecipeError(f"{path}: {key}: {raw[key]!r} is not {tp.__name__}")
    known = {**SPEC_KEYS, **(SPEC_KEYS_V2 if v2 else {})}
    unknown = set(raw) - set(known)
    if unknown:
        raise RecipeError(f"{path}: {sorted(unknown)[0]}: unknown key (expected one of {', '.join(known)})")
    if v2 and (not raw["tokens_factor"] or any(isinstance(k, bool) or not isinstance(k, int) or k < 1
                                               for k in raw["tokens_factor"])):
        raise RecipeError(f"{path}: tokens_factor: {raw['tokens_factor']!r} must be whole numbers of at least 1")
    spec = CalibrationSpec(path, raw["task"], raw["scale"], tuple(raw["baselines"]),
                           tuple(int(w) for w in raw["warmup_updates"]), tuple(float(x) for x in raw["lr"]),
                           raw["max_updates"], raw["validate_interval"], float(raw["window_fraction"]),
                           float(raw["tolerance"]), "v2" if v2 else "v1", raw.get("deep_pre_ln"),
                           tuple(raw.get("tokens_factor", [1])))
    if len(spec.baselines) != 2:
        raise RecipeError(f"{path}: baselines: {list(spec.baselines)!r} must name the two baseline recipes")
    if not spec.warmup_updates or any(w < 1 or w >= spec.max_updates for w in spec.warmup_updates):
        raise RecipeError(f"{path}: warmup_updates: {list(spec.warmup_updates)!r} must lie in [1, max_updates)")
    if not spec.lr or any(not (0 < x < 1) for x in spec.lr):
        raise RecipeError(f"{path}: lr: {list(spec.lr)!r} must lie in (0, 1)")
    if not 0 < spec.validate_interval <= spec.max_updates:
        raise RecipeError(f"{path}: validate_interval: {spec.validate_interval} must lie in [1, max_updates]")
    if not 0 < spec.window_fraction < 1 or not 0 < spec.tolerance < 1:
        raise RecipeError(f"{path}: window_fraction and tolerance must lie in (0, 1)")
    return spec


def recipe_path(spec: CalibrationSpec, name: str) -> Path:
    """recipes/<name>.yaml beside the spec's recipes/calibration/ (a v2 spec sits one folder deeper, in v2/)."""
    return spec.path.parents[2 if spec.rules == "v2" else 1] / f"{name}.yaml"


def base_label(name: str, warmup: int, lr: float) -> str:
    return f"{name.replace('/', '-')}-w{warmup}-lr{lr:g}"


def base_overrides(spec: CalibrationSpec, warmup: int, lr: float) -> list[str]:
    return [f"optim.warmup_updates={warmup}", f"optim.lr={lr:g}", f"optim.max_updates={spec.max_updates}",
            f"train.validate_interval={spec.validate_interval}", f"train.save_interval={spec.validate_interval * 4}",
            "train.keep_last=1", "eval.average_last=1", f"train.divergence_window={spec.max_updates}"]


# -- the rule -------------------------------------------------------------------------------------------------

def best_until(curve: list[tuple[int, float]], length: int) -> float:
    return min((v for s, v in curve if s <= length), default=math.inf)


def converged(curve: list[tuple[int, float]], length: int, window_fraction: float, tolerance: float) -> bool:
    """Best validation NLL up to `length` improved by less than `tolerance` over its last `window_fraction`."""
    before, after = best_until(curve, length * (1 - window_fraction)), best_until(curve, length)
    return math.isfinite(before) and math.isfinite(after) and before - after < tolerance * before


def setting_length(curves: list[list[tuple[int, float]]], warmup: int, spec: CalibrationSpec) -> int | None:
    """The first validation point after warmup where every curve has converged (None within the cap)."""
    steps = sorted(set.intersection(*[{s for s, _ in c} for c in curves])) if curves else []
    for step in steps:
        if warmup < step <= spec.max_updates and all(
                converged(c, step, spec.window_fraction, spec.tolerance) for c in curves):
            return step
    return None


# -- the rule, version 2 (2026-11-29) --------------------------------------------------------------------------

RULES_V2 = "calibration v2 of 2026-11-29 (repro/calibration.py: choose_v2)"  # as records keep it; now `choose`


def learned(status: str, reason: str, best: float, unigram_nll: float) -> str:
    """Why a calibration run did not learn ("" where it did): it failed (the failure rule), or its best validation
    NLL is not NLL_MARGIN nats under the unigram model of its corpus (judging rules v2, repro/judging.py)."""
    from repro.judging import NLL_MARGIN
    if status == "failed":
        return f"failed: {reason}"
    if not best <= unigram_nll - NLL_MARGIN:
        return (f"learned nothing: best validation NLL {best:.3f} is not {NLL_MARGIN:g} nats under the unigram "
                f"model's {unigram_nll:.3f}")
    return ""


def choose(spec: CalibrationSpec, runs: dict, unigram_nll: float, deep: dict) -> dict:
    """Calibration v2 (2026-11-29), fixed before any of its runs.

    `runs[setting][baseline]` and `deep[setting]` are (status, reason, curve) of the baselines' runs and of the
    task's deepest Pre-LN run at a setting (warmup, lr, tokens factor); a curve is [(update, validation NLL)].
    - A setting's length L is the first validation after warmup where both baselines have converged (v1's test:
      the best validation NLL improved by under `tolerance`, relative, over the last `window_fraction` of [0, L]);
      where they have not by the cap, L is the cap (and the row says so).
    - A baseline learned at a setting when its run did not fail and its best validation NLL up to L lies at least
      NLL_MARGIN nats under the corpus's unigram NLL (`learned`). Only settings where both baselines learned are
      candidates.
    - Minimax regret: each baseline's best over the candidates is the least best validation NLL it reaches at any
      candidate; a candidate's regret is the larger of the two baselines' distance from their own best. Candidates
      are taken in order of regret (rounded to 1e-6), then L, warmup, lr, tokens factor.
    - The first candidate at which the deepest Pre-LN run (same setting, L updates) also learned is the choice.
      A candidate whose deep run has not been made stops the walk: that run is what is needed next (`deep_needed`).
    - No candidate, or none whose deepest Pre-LN learns: the task is not informative at this scale, and
      `not_informative` says why. While any baseline run of the grid has not been made, nothing is decided.
    B2T and the other methods are never read."""
    rows, incomplete = [], []
    for setting in spec.settings():
        warmup, lr, k = setting
        row = {"warmup_updates": warmup, "lr": lr, "tokens_factor": k, "length": None, "converged": None,
               "best_valid_nll": {}, "learned": {}, "regret": None, "deep_pre_ln": "not needed", "excluded": ""}
        got = runs.get(setting, {})
        if any(b not in got for b in spec.baselines):  # shown as far as it got; nothing is decided from it
            incomplete.append(setting)
            row["best_valid_nll"] = {b: best_until(got[b][2], spec.max_updates) for b in spec.baselines if b in got}
            row["excluded"] = "not run: " + ", ".join(b for b in spec.baselines if b not in got)
            rows.append(row)
            continue
        curves = [got[b][2] for b in spec.baselines]
        length = setting_length(curves, warmup, spec)
        row["converged"] = length is not None
        row["length"] = length or spec.max_updates
        for b in spec.baselines:
            status, reason, curve = got[b]
            best = best_until(curve, row["length"])
            row["best_valid_nll"][b] = best
            row["learned"][b] = learned(status, reason, best, unigram_nll)
        if any(row["learned"].values()):
            row["excluded"] = "; ".join(f"{b} {why}" for b, why in row["learned"].items() if why)
        rows.append(row)
    decision = {"rules": RULES_V2, "settings": rows, "choice": None, "not_informative": None, "deep_needed": None}
    if incomplete:
        decision["incomplete"] = [{"warmup_updates": w, "lr": lr, "tokens_factor": k} for w, lr, k in incomplete]
        return decision
    candidates = [r for r in rows if not r["excluded"]]
    if not candidates:
        decision["not_informative"] = "no setting of the grid lets both baselines learn"
        return decision
    own_best = {b: min(r["best_valid_nll"][b] for r in candidates) for b in spec.baselines}
    for r in candidates:
        r["regret"] = max(r["best_valid_nll"][b] - own_best[b] for b in spec.baselines)
    order = sorted(candidates, key=lambda r: (round(r["regret"], 6), r["length"], r["warmup_updates"], r["lr"],
                                              r["tokens_factor"]))
    for r in order:
        setting = (r["warmup_updates"], r["lr"], r["tokens_factor"])
        if setting not in deep:
            r["deep_pre_ln"] = "not run"
            decision["deep_needed"] = {"warmup_updates": setting[0], "lr": setting[1], "tokens_factor": setting[2],
                                       "max_updates": r["length"]}
            return decision
        status, reason, curve = deep[setting]
        why = learned(status, reason, best_until(curve, r["length"]), unigram_nll)
        r["deep_pre_ln"] = why or "learned"
        if not why:
            decision["choice"] = {"warmup_updates": setting[0], "lr": setting[1], "tokens_factor": setting[2],
                                  "max_updates": r["length"]}
            return decision
        r["excluded"] = f"{spec.deep_pre_ln} {why}"
    decision["not_informative"] = (f"at no setting where both baselines learn does {spec.deep_pre_ln} learn too")
    return decision


def outcome(spec: CalibrationSpec, decision: dict) -> str:
    """A v2 decision in one line: the choice, "not informative" and why, the deepest Pre-LN run it waits for, or
    undecided (a baseline run not recorded yet)."""
    at = lambda s: f"warmup {s['warmup_updates']:,}, lr {s['lr']:g}, tokens x{s['tokens_factor']}, " \
                   f"{s['max_updates']:,} updates"
    if decision.get("choice"):
        return f"choice: {at(decision['choice'])}"
    if decision.get("not_informative"):
        return f"not informative at {spec.scale}: {decision['not_informative']}"
    if decision.get("deep_needed"):
        return f"waits for {spec.deep_pre_ln} at {at(decision['deep_needed'])}"
    return "undecided until every baseline run is recorded"


def regime(decision: dict) -> dict | None:
    """The regime the mini recipes use: the rule's choice, else v1's provisional one at the cap; with v2's tokens
    factor (v1 has none: 1), the times the mini update's tokens are multiplied."""
    c = decision.get("choice") or decision.get("provisional")
    if c is None:
        return None
    return {**{k: c[k] for k in ("warmup_updates", "lr", "max_updates")}, "tokens_factor": c.get("tokens_factor", 1)}


# -- records --------------------------------------------------------------------------------------------------

def read_run(run_dir: Path) -> tuple[dict | None, list[dict]]:
    status = read_json(run_dir / "status.json") if (run_dir / "status.json").is_file() else None
    log = read_jsonl(run_dir / "log.jsonl") \
        if (run_dir / "log.jsonl").is_file() else []
    return status, log


def job_runs(spec: CalibrationSpec, jobs: list) -> list[tuple[str, int]] | None:
    """The (recipe name, batches of its recipe's size) the grid's `jobs` train at most (each to its cap, a run of
    tokens factor k k batches an update); None where a job trains a group (grouped, its pace is not a run's)."""
    from repro.pace import recipe_batches
    names = {label(name, st): (name, st[2]) for st in spec.settings()
             for name in (*spec.baselines, *([spec.deep_pre_ln] if spec.deep_pre_ln else []))}
    if any(j.name not in names for j in jobs):
        return None
    return [(names[j.name][0], j.total_updates * names[j.name][1] * recipe_batches(names[j.name][0], spec.scale))
            for j in jobs]


NOTES = ("commit_note", "note")  # what a person wrote on a collected record: kept when it is collected again


def collect_runs(entries: list[tuple[str, dict]], runs_dir: Path, out_dir: Path) -> None:
    """For each (label, fields): the finished run runs_dir/label's record (the fields, then its status's) and log,
    as out_dir/label.json and .log.jsonl.

    The provenance (recipe hash, overrides, commit) is the run's own, from its status.json: the recipes change
    once the choice is applied, so hashing them again at collection time would name a recipe that never trained.
    A record of another recipe hash, or of another run (another start), already in place is refused (RecordError),
    never overwritten; the notes a person added to the one in place (NOTES) are kept.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    for base, fields in entries:
        status, log = read_run(runs_dir / base)
        if status is None or status.get("status") not in ("completed", "failed"):
            continue
        record = {**fields, **{
            k: status.get(k) for k in ("recipe", "recipe_hash", "overrides", "scale", "seed", "commit", "hardware",
                                       "started", "duration_s", "status", "reason", "step")},
            **({"model_code": status["model_code"]} if "model_code" in status else {}),
            **status_provenance(status)}
        if (runs_dir / base / "metrics.json").is_file():  # evaluated as it ended (calibration v2.1's gate)
            record["metrics"] = read_json(runs_dir / base / "metrics.json")
        path = out_dir / f"{base}.json"
        check_record_slot(path, record["recipe_hash"])
        if path.is_file():
            in_place = json.loads(path.read_text(encoding="utf-8"))
            if in_place.get("started") not in (None, record["started"]):
                raise RecordError(f"{path} holds another run's record (started {in_place['started']}); the run in "
                                  f"{runs_dir / base} started {record['started']}: remove one of the two")
            record.update({k: in_place[k] for k in NOTES if k in in_place})
        atomic_write_text(path, json.dumps(record, indent=2, sort_keys=True) + "\n")
        atomic_write_text(out_dir / f"{base}.log.jsonl", "".join(json.dumps(r) + "\n" for r in log))


def recorded_run(out_dir: Path, base: str) -> tuple[str, str, list[tuple[int, float]]] | None:
    """A collected run as the rules read it: (status, reason, validation curve); None where not recorded."""
    got = read_recorded(out_dir, base)
    return None if got is None else (got[0]["status"], str(got[0].get("reason", "")), got[1])


def read_recorded(out_dir: Path, base: str) -> tuple[dict, list[tuple[int, float]]] | None:
    """A collected run's record and validation curve; None where not recorded. A record that is not one finished
    run's, or a log without a readable validation curve, is a one-line ValueError naming the file: a decision is
    never made from a damaged record."""
    path = out_dir / f"{base}.json"
    if not path.is_file():
        return None
    record = read_json(path)
    if not isinstance(record, dict) or record.get("status") not in ("completed", "failed"):
        status = record.get("status") if isinstance(record, dict) else f"a JSON {type(record).__name__}"
        raise ValueError(f"{path}: not a finished calibration run's record (status {status!r}); restore it with "
                         f"git or remove it")
    log = out_dir / f"{base}.log.jsonl"
    if not log.is_file():
        raise ValueError(f"{log}: missing; a calibration record is read with its log (restore it with git)")
    curve = valid_curve(read_jsonl(log), log)
    if not curve and record["status"] == "completed":
        raise ValueError(f"{log}: no validation row in the log of a completed run; restore it with git")
    return record, curve


def valid_curve(rows: list, path: Path | None = None) -> list[tuple[int, float]]:
    """A training log's validation curve, [(update, validation NLL)], finite values only (a diverged run logs
    inf or NaN). Given the log's path, a row that is not a log row (no whole update, a validation NLL that is not a
    number or is negative) is a one-line ValueError naming the file and the line."""
    curve = []
    for i, r in enumerate(rows, 1):
        if not isinstance(r, dict) or "valid_nll" not in r:
            if path is not None and not isinstance(r, dict):
                raise ValueError(f"{path}: line {i} is not a log row (a JSON {type(r).__name__})")
            continue
        step, nll = r.get("step"), r["valid_nll"]
        ok = (isinstance(step, int) and not isinstance(step, bool) and step >= 0 and isinstance(nll, (int, float))
              and not isinstance(nll, bool) and not (math.isfinite(nll) and nll < 0))
        if not ok:
            if path is not None:
                raise ValueError(f"{path}: line {i} is no validation row (step {step!r}, valid_nll {nll!r})")
            continue
        if math.isfinite(nll):
            curve.append((step, float(nll)))
    return curve


def kept_choice(path: Path, decision: dict) -> dict | None:
    """The choice.json already written for this same decision, with when and where it was first made; else None."""
    old = read_json(path) if path.is_file() else {}
    if not isinstance(old, dict):
        raise ValueError(f"{path}: not a calibration choice (a JSON {type(old).__name__}); restore it with git or "
                         f"remove it to decide again")
    same = {k: v for k, v in old.items() if k not in ("decided", "commit")} == json.loads(json.dumps(decision))
    return old if old and same else None


def write_choice(path: Path, decision: dict) -> None:
    decision.update({"decided": now(), "commit": git_commit()})
    atomic_write_text(path, json.dumps(decision, indent=2) + "\n")


# -- running v2 -------------------------------------------------------------------------------------------------

def label(name: str, setting: tuple[int, float, int]) -> str:
    warmup, lr, k = setting
    return base_label(name, warmup, lr) + (f"-x{k}" if k != 1 else "")


def parse_setting(spec: CalibrationSpec, text: str) -> tuple[int, float, int]:
    """The grid setting `text` names as label does (w1000-lr0.0005-x4; x1 has no suffix)."""
    for st in spec.settings():
        if label("", st).lstrip("-") == text:
            return st
    raise ValueError(f"--setting {text!r}: not a setting of {spec.path} (its settings: "
                     + ", ".join(label("", st).lstrip("-") for st in spec.settings()) + ")")


def overrides(spec: CalibrationSpec, name: str, setting: tuple[int, float, int],
                 max_updates: int | None = None) -> list[str]:
    """v1's overrides at the setting, tokens per update times k (more batches accumulated per update), and for a
    deepest Pre-LN run its candidate's length instead of the cap."""
    from repro.config import resolve
    warmup, lr, k = setting
    sets = base_overrides(spec, warmup, lr)
    if max_updates is not None:
        sets = [f"optim.max_updates={max_updates}" if x.startswith("optim.max_updates=") else x for x in sets]
    if k != 1:
        base = resolve(recipe_path(spec, name), spec.scale).recipe.optim.gpus_per_update
        sets.append(f"optim.gpus_per_update={base * k}")
    return sets


def finished(run_dir: Path) -> bool:
    status = run_dir / "status.json"
    return status.is_file() and json.loads(status.read_text()).get("status") in ("completed", "failed")


def live_run(run_dir: Path) -> tuple[str, str, list[tuple[int, float]]] | None:
    """A run as far as it has trained, as the rules read it: (status, reason, validation curve); None before its
    first validation. A line its trainer is still writing is skipped."""
    status = read_json(run_dir / "status.json") if (run_dir / "status.json").is_file() else {}
    curve = valid_curve(read_jsonl(run_dir / "log.jsonl", tolerant=True))
    return (status.get("status", "running"), status.get("reason", ""), curve) if curve or status else None


def stop_settled(spec: CalibrationSpec, runs_dir: Path, out_dir: Path) -> list[str]:
    """Ask the baseline runs still training whose setting the rule has settled to stop (loop.request_stop); returns
    their labels.

    A setting is settled once its length L is known: both baselines' curves have converged at a validation point
    (`setting_length`), and choose reads nothing of them past L. It is settled as well when a baseline failed:
    the setting is then out whatever its partner does. A run trains on to the cap only while neither has
    happened, so the grid costs what its settings need and no more."""
    from repro.train.loop import STOP_FILE, request_stop
    asked = []
    for st in spec.settings():
        got = {b: recorded_run(out_dir, label(b, st)) or live_run(runs_dir / label(b, st))
               for b in spec.baselines}
        failed = [b for b, g in got.items() if g and g[0] == "failed"]
        length = None if failed or not all(got.values()) else setting_length([g[2] for g in got.values()], st[0],
                                                                             spec)
        if not failed and length is None:
            continue
        reason = (f"calibration v2: {failed[0]} failed, so this setting is out" if failed else
                  f"calibration v2: both baselines converged at update {length}, this setting's length")
        for b in spec.baselines:
            run_dir = runs_dir / label(b, st)
            if got[b] and got[b][0] == "running" and not (run_dir / STOP_FILE).is_file():
                request_stop(run_dir, reason)
                asked.append(label(b, st))
    return asked


def to_run(spec: CalibrationSpec, name: str, k: int, runs_dir: Path, out_dir: Path) -> list[tuple[int, float, int]]:
    """Baseline `name`'s settings at tokens factor k with neither a finished run in runs_dir nor a collected record
    in out_dir (a record made elsewhere, on another machine or from another checkout, counts as run)."""
    return [st for st in spec.settings() if st[2] == k and not finished(runs_dir / label(name, st))
            and not (Path(out_dir) / f"{label(name, st)}.json").is_file()]


def jobs(spec: CalibrationSpec, task: str, runs_dir: Path, data_root: Path, grouped: bool, out_dir: Path,
            results_dir: Path, settings: list[tuple[int, float, int]] | None = None, flags: list[str] | None = None,
            one_forward: bool = False, evaluate: bool = False) -> list:
    """The grid's baseline runs not made yet (`to_run`), of `settings` alone where given (a grid split across
    machines or sessions): one `train` job each (`flags` and `one_forward` as train_job takes them), or, `grouped`,
    one job per baseline and tokens factor training its learning rates and warmups as one stacked model (`calibrate
    TASK --train-group`)."""
    from repro.launch import Job
    from repro.reproduce import last_checkpoint
    wanted = spec.settings() if settings is None else settings
    out = []
    # tokens factor outermost: the cheap settings complete (both baselines) before the costly ones start
    for k in (k for k in spec.tokens_factor if any(st[2] == k for st in wanted)):
        if not grouped:  # a setting's two baselines side by side: each stops once the pair settles the setting,
            # the one further behind (fewer updates checkpointed) first, so that the other does not train on alone
            todo = {name: to_run(spec, name, k, runs_dir, out_dir) for name in spec.baselines}
            for st in (st for st in spec.settings() if st[2] == k and st in wanted):
                names = sorted((n for n in spec.baselines if st in todo[n]),
                               key=lambda n: last_checkpoint(runs_dir / label(n, st)) or 0)
                out += [train_job(spec, name, st, runs_dir, data_root, flags=flags, one_forward=one_forward,
                                  evaluate=evaluate) for name in names]
            continue
        for name in spec.baselines:
            unmade = to_run(spec, name, k, runs_dir, out_dir)
            todo = [st for st in unmade if st in wanted]
            if len(todo) > 1 and todo == unmade:  # a group trains all its factor's unmade settings (--train-group)
                base = f"{name.replace('/', '-')}-x{k}-group"
                steps = [["calibrate", task, "--train-group", f"{name}:{k}", "--runs", str(runs_dir), "--root",
                          str(data_root), "--results", str(results_dir)]]
                steps += [["evaluate", str(runs_dir / label(name, st)), "--root", str(data_root), "--results",
                           str(runs_dir / "records")] for st in todo] if evaluate else []
                out.append(Job(base, steps, runs_dir / f"{base}.out", runs_dir / label(name, todo[0]),
                               spec.max_updates))
                continue
            out += [train_job(spec, name, st, runs_dir, data_root, evaluate=evaluate) for st in todo]
    return out


def train_job(spec: CalibrationSpec, name: str, setting: tuple, runs_dir: Path, data_root: Path,
              max_updates: int | None = None, flags: list[str] | None = None, one_forward: bool = False,
              evaluate: bool = False):
    """One run's `train` job, with `flags`; `one_forward`: a tokens-x`k` update's k batches in one forward
    (train --tokens-per-gpu), the same update made with the launches of one batch; `evaluate`: then its
    evaluation (calibration v2.1's gate reads the metrics)."""
    from repro.config import resolve
    from repro.launch import Job
    from repro.train.tasks import batch_tokens
    run_dir = runs_dir / label(name, setting)
    args = ["train", str(recipe_path(spec, name)), "--scale", spec.scale, "--run-dir", str(run_dir), "--results",
            str(runs_dir / "records"), "--root", str(data_root), "--resume", *(flags or [])]
    if one_forward and setting[2] > 1:
        per_batch = batch_tokens(resolve(recipe_path(spec, name), spec.scale).recipe)
        args += ["--tokens-per-gpu", str(per_batch * setting[2])]
    for item in overrides(spec, name, setting, max_updates):
        args += ["--set", item]
    steps = [args] + ([["evaluate", str(run_dir), "--root", str(data_root), "--results", str(runs_dir / "records")]]
                      if evaluate else [])
    return Job(label(name, setting), steps, run_dir / "train.out", run_dir, max_updates or spec.max_updates)


def train_grid_group(spec: CalibrationSpec, name: str, k: int, runs_dir: Path, data_root: Path, out_dir: Path) -> None:
    """One baseline's settings at tokens factor k not made yet (`to_run`), trained as one group
    (repro/train/group.py)."""
    from repro.config import resolve
    from repro.train.loop import train_group
    todo = to_run(spec, name, k, runs_dir, out_dir)
    if todo:
        train_group([resolve(recipe_path(spec, name), spec.scale, overrides(spec, name, st)) for st in todo],
                    [runs_dir / label(name, st) for st in todo], data_root, resume=True)


def entries(spec: CalibrationSpec, deep: dict | None = None) -> list[tuple[str, dict]]:
    """(label, record fields) of the grid's baseline runs, and of the deepest Pre-LN runs at `deep` settings."""
    fields = lambda name, st: {"recipe_name": name, "task": spec.task, "warmup_updates": st[0], "lr": st[1],
                               "tokens_factor": st[2], "rules": RULES_V2}
    out = [(label(name, st), fields(name, st)) for st in spec.settings() for name in spec.baselines]
    return out + [(label(spec.deep_pre_ln, st), fields(spec.deep_pre_ln, st)) for st in spec.settings()]


def unigram_nll_of(spec: CalibrationSpec, results_dir: Path) -> float:
    """The validation NLL of the unigram model of the baselines' corpus: results/references/<corpus>.json under
    `results_dir`, else the one committed with lnrepro (a grid recorded into another folder)."""
    from repro.config import resolve
    from repro.references import references_path
    from repro.results import RESULTS_DIR
    corpus = resolve(recipe_path(spec, spec.baselines[0]), spec.scale).recipe.data.corpus
    paths = [references_path(results_dir, corpus), references_path(RESULTS_DIR, corpus)]
    path = next((p for p in paths if p.is_file()), None)
    if path is None:
        raise RecipeError(f"{paths[0]}: no references for {corpus}; `lnrepro references` computes them")
    return read_json(path)["unigram"]["valid_nll"]


def recorded(spec: CalibrationSpec, out_dir: Path) -> tuple[dict, dict]:
    """The collected runs as choose reads them: the baselines' by setting, and the deepest Pre-LN's."""
    runs = {st: got for st in spec.settings()
            if (got := {b: r for b in spec.baselines if (r := recorded_run(out_dir, label(b, st)))})}
    deep = {st: r for st in spec.settings() if (r := recorded_run(out_dir, label(spec.deep_pre_ln, st)))}
    return runs, deep


def grid_decision(spec: CalibrationSpec, out_dir: Path, results_dir: Path, recorded: tuple | None = None) -> dict:
    """choose on the collected records (`recorded`, read here unless given), writing nothing."""
    runs, deep = recorded or recorded(spec, out_dir)
    decision = choose(spec, runs, unigram_nll_of(spec, results_dir), deep)
    decision.update({"task": spec.task, "scale": spec.scale, "spec": str(spec.path), "baselines": list(spec.baselines),
                     "deep_pre_ln": spec.deep_pre_ln})
    return decision


def plot(spec: CalibrationSpec, runs: dict, deep: dict, decision: dict, png: Path, unigram_nll: float,
         headline: str) -> None:
    """Validation NLL of each baseline (and of the deepest Pre-LN where run) at every setting: one panel each, with
    the "learned" gate (NLL_MARGIN under the unigram model) dotted, where a setting's length is known the best
    NLL up to it (what the rule reads) as a dot, and a cross at the end of a run the rule reads as failed (whatever
    its NLL: under calibration v2.1, a run no better than the best constant output). `headline`: the rule and its
    outcome, as the title's second part."""
    from repro.judging import NLL_MARGIN
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from repro.figures.output import save_figure
    names = [*spec.baselines, spec.deep_pre_ln]
    lengths = {(r["warmup_updates"], r["lr"], r["tokens_factor"]): r["length"] for r in decision["settings"]}
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.6), sharex=True, sharey=True)
    for ax, name in zip(axes, names):
        dotted = False
        for i, st in enumerate(spec.settings()):
            got = deep.get(st) if name == spec.deep_pre_ln else runs.get(st, {}).get(name)
            if got and got[2]:
                xs, ys = zip(*got[2])
                # a learning rate and warmup has one colour in every panel; the tokens factor its line style
                colour = f"C{i % (len(spec.lr) * len(spec.warmup_updates))}"
                failed = got[0] == "failed"
                ax.plot(xs, ys, label=f"warmup {st[0]}, lr {st[1]:g}, tokens x{st[2]}" + (": failed" if failed else ""),
                        color=colour, linestyle="-" if st[2] == 1 else "--")
                if failed:
                    ax.plot(xs[-1], ys[-1], "x", color=colour, markersize=9, markeredgewidth=2)
                read = [(s, v) for s, v in got[2] if s <= (lengths.get(st) or 0)]
                if read:
                    ax.plot(*min(read, key=lambda p: p[1]), "o", color=colour, markersize=5)
                    dotted = True
        ax.axhline(unigram_nll - NLL_MARGIN, color="grey", linestyle=":", linewidth=1,
                   label=f"learned below this: unigram {unigram_nll:.2f} - {NLL_MARGIN:g}")
        ax.set_title(name)
        ax.set_xlabel("updates")
        if len(ax.lines) == 1:
            ax.text(0.5, 0.5, "no run yet", transform=ax.transAxes, ha="center", va="center", color="grey")
        if dotted:
            ax.plot([], [], "o", color="black", markersize=5, label="best up to its setting's length")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("validation NLL (nats, shared axis)")
    fig.suptitle(f"Calibration of the {spec.scale} regime, {spec.task}: {headline}", fontsize=9, wrap=True)
    fig.tight_layout()
    save_figure(fig, png, None, {})
