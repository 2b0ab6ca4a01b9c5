"""Run records with provenance: one JSON file per (scale, recipe, seed) under results/, written atomically.

A record names the run id, the recipe path and hash, the overrides, the git commit, scale, seed, the prepared corpus
(its name and a fingerprint of its files), hardware, start time, duration, status (completed / failed) with its
reason, and the metrics. The rules that keep them safe:
- a run of the recipe as committed goes to results/<scale>/<recipe>/seed<N>.json; a run with `--set` overrides
  to results/<scale>/overrides/<recipe>/<hash>/seed<N>.json, never over the recipe's own record;
- a record is never replaced by a run of another recipe hash: remove it first (git keeps it);
- tables and claims read only records whose hash is the current recipe's (`current_records`); the others are
  counted as stale.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from repro.config import RecipeError, resolve
from repro.files import atomic_write_text, read_jsonl


RESULTS_DIR = Path(os.environ.get("LNREPRO_RESULTS", "results"))


def stretches(rec: dict) -> list[dict]:
    """A record's stretches of training: its `segments`, or the whole run as one where it was trained in one."""
    return rec.get("segments") or [{**rec, "from_update": 0, "to_update": rec.get("updates")}]


def stretch_hardware(rec: dict) -> list[dict]:
    """The hardware of each stretch of a run's training (the record's own where a stretch of before stretches kept
    it lacks one): a run begun on a GPU machine and finished on a CPU names both."""
    return [part.get("hardware") or rec.get("hardware") or {} for part in stretches(rec)]


def status_provenance(status: dict) -> dict:
    """What a record copies from its run's status.json beyond the common fields: the corpus fingerprint (runs from
    before it was kept lack it), the batching that made its updates (`--tokens-per-gpu`) and, in fp16, the steps
    its loss scaler skipped, the group it trained in (`train --seeds`), the CPU seconds of its training process where every stretch kept them and, for a
    run trained in more than one stretch (or resumed from a checkpoint of before stretches were kept), its
    `segments`, so a record says where each of its updates was made. A run trained with --cuda-graphs keeps its
    graphs and its replayed and eager batches, summed over the stretches that used them."""
    parts = status.get("segments", [])
    resumed = len(parts) > 1 or (parts and parts[0]["from_update"] > 0)
    cpu = [p.get("cpu_s") for p in parts]
    graphed = [p["cuda_graphs"] for p in parts if "cuda_graphs" in p]
    return {**({"data": status["data"]} if "data" in status else {}),
            **{k: status[k] for k in ("batching", "fp16_skipped_steps", "group") if k in status},
            **({"cpu_s": round(sum(cpu), 1)} if cpu and None not in cpu else {}),
            **({"cuda_graphs": {k: sum(g[k] for g in graphed) for k in graphed[0]}} if graphed else {}),
            **({"segments": parts} if resumed else {})}


def metric_at(metrics, path):
    """The value at a key path into a record's metrics (None where any step is missing)."""
    for k in path:
        metrics = metrics.get(k) if isinstance(metrics, dict) else None
    return metrics


class RecordError(ValueError):
    """A record that would overwrite another recipe's record; the message is one line."""


OVERRIDES_DIR = "overrides"


def record_path(results_dir: Path, scale: str, recipe_name: str, seed: int, overrides: list | None = None,
                recipe_hash: str = "") -> Path:
    if overrides:
        return Path(results_dir) / scale / OVERRIDES_DIR / recipe_name / recipe_hash / f"seed{seed}.json"
    return Path(results_dir) / scale / recipe_name / f"seed{seed}.json"


def check_record_slot(path: Path, recipe_hash: str, run_dir: Path | str | None = None, replace: bool = False) -> None:
    """Refuse (RecordError) when `path` holds a record of another recipe hash; or, unless `replace`, a finished
    record (completed or failed) of another run than `run_dir`: a run that merely shares a record's key never
    replaces it (its own evaluation does: the same run)."""
    if not path.is_file():
        return
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise RecordError(f"{path}: not a readable record (garbled JSON); restore it with git or remove it") from None
    if isinstance(old, dict) and old.get("recipe_hash") not in (None, recipe_hash):
        raise RecordError(f"{path} holds a run of recipe hash {old.get('recipe_hash')} (commit "
                          f"{str(old.get('commit', '?'))[:7]}); this run's hash is {recipe_hash}: remove that record "
                          f"first (git rm; git keeps it) or write elsewhere with --results DIR")
    same_run = run_dir is not None and isinstance(old, dict) and Path(str(old.get("run_dir", ""))).resolve() == \
        Path(run_dir).resolve()
    if (isinstance(old, dict) and old.get("status") in ("completed", "failed") and run_dir is not None
            and not same_run and not replace):
        evaluated = "evaluated" if old.get("metrics") else "not evaluated"
        raise RecordError(f"{path} holds a finished record ({old.get('status')}, {evaluated}) of another run "
                          f"({old.get('run_dir')}); --replace-record replaces it, --results DIR writes elsewhere")


def log_path(record_file: Path) -> Path:
    """The training log kept beside a record (seed1.json -> seed1.log.jsonl), so curves survive without runs/."""
    return record_file.with_name(record_file.name.replace(".json", ".log.jsonl"))


def write_record(results_dir: Path, record: dict, run_log: Path | None = None, replace: bool = False) -> Path:
    """Write the record (and a copy of the run's training log beside it), refusing another recipe's slot and
    another run's finished record (unless `replace`)."""
    path = record_path(results_dir, record["scale"], record["recipe_name"], record["seed"],
                       record.get("overrides"), record.get("recipe_hash", ""))
    check_record_slot(path, record.get("recipe_hash", ""), record.get("run_dir"), replace)
    if run_log is not None and Path(run_log).is_file():
        atomic_write_text(log_path(path), Path(run_log).read_text(encoding="utf-8"))
    atomic_write_text(path, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return path


def record_log(results_dir: Path, record: dict) -> list[dict]:
    """A record's training log: the copy beside it in results/, else its run directory's."""
    path = log_path(record_path(results_dir, record["scale"], record["recipe_name"], record["seed"],
                                record.get("overrides"), record.get("recipe_hash", "")))
    if not path.is_file():
        path = Path(record.get("run_dir", "")) / "log.jsonl"
    if not path.is_file():
        return []
    return read_jsonl(path)


def load_records(results_dir: Path, scale: str | None = None) -> list[dict]:
    """Every record of a scale, the override area included; `current_records` is what tables read."""
    root = Path(results_dir)
    if not root.is_dir():
        return []
    base = root / scale if scale else root
    out = []
    for p in sorted(base.rglob("seed*.json")):
        if not p.is_file():  # a folder, a FIFO (which a read would wait on forever), a device: never a record
            raise RecordError(f"{p}: not a regular file, so not a record; remove it")
        try:
            rec = json.loads(p.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise RecordError(f"{p}: not a readable record (garbled JSON); restore it with git or remove it") from None
        check_record(rec, p)
        check_record_place(rec, p, root)
        out.append(rec)
    return out


def check_record_place(rec: dict, path: Path, root: Path) -> None:
    """A record counts only where its own recipe files it (<scale>/<recipe>/seedN.json, overrides below their own
    folder), and only for a recipe below recipes/: a copy elsewhere would count as another seed of a cell."""
    name = rec["recipe_name"]
    if name.startswith("/") or ".." in Path(name).parts:
        raise RecordError(f"{path}: recipe_name: {name!r} is not a recipe below recipes/; restore the record with "
                          f"git or remove it")
    parts = path.relative_to(root).parts
    own = parts[1:-1] if parts[1:2] != (OVERRIDES_DIR,) else parts[2:-2]
    if "/".join(own) != name or parts[0] != rec["scale"]:
        raise RecordError(f"{path}: a record of {rec['scale']}/{name} filed elsewhere (it would count as another "
                          f"seed of this folder's cell); move it to its own folder or remove it")


# The fields every reader of results/ relies on, and the type each must have (one schema for them all).
RECORD_FIELDS = {"recipe_name": str, "recipe_hash": str, "scale": str, "seed": int, "status": str, "task": str,
                 "metrics": dict}
RECORD_STATUSES = ("completed", "failed")
NUMERIC_METRICS = ("bleu_average", "valid_nll", "source_blind_nll", "eval_seconds")
NUMERIC_SPLIT_METRICS = ("bleu", "rouge1", "rouge2", "rougeL", "perplexity", "wer")


def check_record(rec, path: Path) -> None:
    """Refuse (RecordError, one line naming the file and the field) a record no reader could use as it is: never
    dropped or miscounted in silence."""
    bad = lambda field, why: RecordError(f"{path}: {field}: {why}; restore the record with git or remove it")
    if not isinstance(rec, dict):
        raise bad("(top level)", f"a JSON {type(rec).__name__}, not a record")
    for field, kind in RECORD_FIELDS.items():
        if field not in rec:
            raise bad(field, "missing")
        if not isinstance(rec[field], kind) or isinstance(rec[field], bool):
            raise bad(field, f"{rec[field]!r} is not a {kind.__name__}")
    if rec["status"] not in RECORD_STATUSES:
        raise bad("status", f"{rec['status']!r} is not one of {', '.join(RECORD_STATUSES)}")
    if path.name.startswith("seed") and path.name != f"seed{rec['seed']}.json":
        raise bad("seed", f"{rec['seed']} is not the seed its file name says ({path.name})")
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    m = rec["metrics"]
    for key in NUMERIC_METRICS:
        if key in m and not number(m[key]):
            raise bad(f"metrics.{key}", f"{m[key]!r} is not a number")
    for split, values in (m.get("splits") or {}).items():
        for key in NUMERIC_SPLIT_METRICS:
            if isinstance(values, dict) and key in values and not number(values[key]):
                raise bad(f"metrics.splits.{split}.{key}", f"{values[key]!r} is not a number")


def recipes_dir() -> Path:
    """recipes/ in the working directory when there is one, else the repository's."""
    return Path("recipes") if Path("recipes").is_dir() else Path(__file__).resolve().parents[1] / "recipes"


_HASHES: dict[tuple[str, str, str], str | None] = {}  # (recipes folder, recipe, scale) -> hash, once per process


def current_hash(recipe_name: str, scale: str) -> str | None:
    """The hash a record of `recipe_name` at `scale` must carry to count (None: no such recipe or scale)."""
    key = (str(recipes_dir().resolve()), recipe_name, scale)
    if key not in _HASHES:
        try:
            _HASHES[key] = resolve(recipes_dir() / f"{recipe_name}.yaml", scale).hash()
        except RecipeError:
            _HASHES[key] = None
    return _HASHES[key]


def current_records(results_dir: Path, scale: str) -> tuple[dict[str, list[dict]], dict[str, list[dict]]]:
    """(recipe name -> records of the current recipe, no overrides), (recipe name -> its stale records)."""
    current: dict[str, list[dict]] = {}
    stale: dict[str, list[dict]] = {}
    for rec in load_records(results_dir, scale):
        if rec.get("overrides"):
            continue
        name = rec["recipe_name"]
        if rec.get("recipe_hash") == current_hash(name, scale):
            current.setdefault(name, []).append(rec)
        else:
            # its own note and, trained before its task's regime was chosen, that regime: both hold
            reason = "; ".join(r for r in (rec.get("stale_reason"), regime_changed(results_dir, scale, rec)) if r)
            stale.setdefault(name, []).append({**rec, **({"stale_reason": reason} if reason else {})})
    return current, stale


def rule_version(rules: str) -> str:
    """A rule's version from its stated name: "calibration v2.1" of "calibration v2.1 of 2026-12-03 (...)"."""
    return rules.split(" of ")[0]


def regime_changed(results_dir: Path, scale: str, rec: dict) -> str:
    """Why a record of a changed recipe is stale when its task's regime was chosen after it started (calibration
    v2's choice.json under results/<scale>/calibration/v2/<task>/): the regime it was not trained under and the rule
    version that chose it; else "" (also where the choice kept the regime the recipes trained)."""
    task = rec["recipe_name"].split("/")[0] if "/" in rec["recipe_name"] else "mt"
    path = Path(results_dir) / scale / "calibration" / "v2" / task / "choice.json"
    try:
        decision = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return ""
    chosen, decided = decision.get("choice"), str(decision.get("decided") or "")
    if not chosen or not decided or decision.get("kept_v1") or str(rec.get("started") or "") >= decided:
        return ""  # a regime kept as it was (calibration v2.1's kept v1) made nothing stale
    rules = rule_version(str(decision.get("rules") or "calibration v2"))
    return (f"trained before {rules} chose its task's {scale} regime on {decided[:10]}: warmup "
            f"{chosen['warmup_updates']:,}, lr {chosen['lr']:g}, tokens x{chosen.get('tokens_factor', 1)}, "
            f"{chosen['max_updates']:,} updates")


def stale_note(name: str, records: list[dict]) -> str:
    """Why a cell's records no longer count: the note stored with them (`stale_reason`), else the hash change."""
    reasons = sorted({r.get("stale_reason") or f"its recipe changed since (hash {r.get('recipe_hash')})"
                      for r in records})
    return f"{name}: {len(records)} stale record{'s' if len(records) > 1 else ''} ({'; '.join(reasons)})"
