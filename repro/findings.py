"""What the evidence at one scale says, task by task: which of the paper's claims reproduce, which do not, which stay
inconclusive, and what each still needs (the runs its own verdict asks of its cells, with the wall time they take
on the fastest machines whose records priced them). Generated from the claims' verdicts (repro/claims.py) and the
runs still to make (repro/needed.py); it adds no judgement of its own."""

from __future__ import annotations

import re
from pathlib import Path

from repro.claims import CLAIMS, claim_cells, task_folder, verdict_counts
from repro.judging import judged_records
from repro.markdown import escape
from repro.needed import SEEDS_COMPARED, SEEDS_ELSEWHERE, claim_missing, missing_runs, seed_span
from repro.pace import machine_paces, missing_compute, wall_time, whole_runs as durations_of
from repro.results import load_records
from repro.tables.spec import SPECS
from repro.verdicts import evaluate_claims

# (task folder, heading): the order and words of the sections
TASKS = (("mt", "Machine translation (Tables 1, 5, 9; Figures 1, 3, 5; Table 11 extends them)"),
         ("gigaword", "Summarisation (Tables 2, 6, 10)"), ("wikitext103", "Language modelling (Table 3)"),
         ("librispeech", "Speech recognition (Table 4)"))
ORDER = ("not reproduced", "smaller than the paper's", "inconclusive", "not decidable at this scale", "reproduced",
         "not informative", "not run")


def reason(row: dict) -> str:
    """The test behind a verdict, in a line: the deciding comparison's, the seeds that failed, or the evidence."""
    judged = row.get("comparisons")
    if judged:
        if len(judged) == 1:
            return judged[0]["why"]
        if row["verdict"] == "reproduced":
            return f"every one of {len(judged)} comparisons reproduced"
        first = next(j for j in judged if j["verdict"] == row["verdict"])
        return f"against {first['cells'][1]}: {first['why']}"
    test = row.get("test") or {}
    if "failed" in test:
        return f"{test['failed']}/{test['seeds']} seeds failed" + (
            f"; needs {test['seeds_needed']} seeds and a majority" if row["verdict"] == "inconclusive" else "")
    return "" if row["verdict"] == "not run" else row["evidence"]


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def fastest(rows: list[dict], results_dir: Path, scale: str, known) -> str:
    """The wall time the missing runs `rows` take on the fastest GPU and on the fastest CPU setting that price all
    of them, or why none does. A CPU trains as many runs at once as its cores hold runs of the setting's threads
    (one-thread runs side by side), each started as a lane frees, as `lnrepro reproduce --plan` schedules them; a
    GPU one at a time."""
    costs, machines = missing_compute(results_dir, scale, rows, known)
    wall = {label: wall_time([s for c in costs for s in c["each"][label]], machines[label]["at_once"])
            for label in set.intersection(*(set(c["each"]) for c in costs))}
    picks = [min((x for x in wall if ("thread" in x) == cpu), key=wall.get, default=None) for cpu in (False, True)]
    what = "this depth" if len(costs) == 1 else "all their depths on one machine"
    return "; ".join(f"{hours(wall[x])} on {x}" for x in picks if x) or whole_runs(rows, results_dir, scale, what)


def whole_runs(rows: list[dict], results_dir: Path, scale: str, what: str) -> str:
    """Where no record keeps a pace (no CPU threads recorded), the cost as `reproduce --plan` reads it then: the
    whole runs of each recipe, else of its depth, wherever they trained."""
    records = [r for r in load_records(results_dir, scale) if not r.get("overrides") and r.get("duration_s")]
    total = 0.0
    for row in rows:
        durations, _ = durations_of(records, row["recipe"])
        if not durations:
            return f"not priced: no record keeps a pace of {what}"
        total += sum(durations) / len(durations) * len(row["seeds"])
    return f"about {hours(total)} one at a time, as whole runs of it took (no record keeps a pace of {what})"


def needs(cells: list[str], missing: dict[str, dict], results_dir: Path, scale: str, known) -> str:
    """The runs `cells` still lack, and the wall time they take (fastest) ("" when none is missing)."""
    rows = [missing[c] for c in cells if c in missing]
    if not rows:
        return ""
    runs = sum(len(r["seeds"]) for r in rows)
    what = ", ".join(f"{r['recipe']} seed{'s' if len(r['seeds']) > 1 else ''} {seed_span(r['seeds'])}"
                     for r in rows)
    return f"still to run: {runs} run{'s' if runs > 1 else ''} ({what}); {fastest(rows, results_dir, scale, known)}"


def render_still_to_run(results_dir: Path, scale: str) -> str:
    """The runs still to make, per task and depth, with the wall time they take (fastest): what finishing the
    evidence at `scale` costs, in a table (the runs themselves and their commands are on the results page)."""
    results_dir = Path(results_dir)
    known = machine_paces(results_dir, scale)
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in missing_runs(results_dir, scale):
        groups.setdefault((SPECS[r["table"]].recipe_folder or "mt", r["group"]), []).append(r)
    order = [task for task, _ in TASKS]
    lines = ["| task | depth | runs | wall time on the fastest GPU and CPU that priced them |", "|---|---|---|---|"]
    for (task, depth), rows in sorted(groups.items(), key=lambda kv: order.index(kv[0][0])):
        lines.append(f"| {task} | {depth} | {sum(len(r['seeds']) for r in rows)} | "
                     f"{fastest(rows, results_dir, scale, known)} |")
    total = sum(len(r["seeds"]) for rows in groups.values() for r in rows)
    head = (f"**Still to run at scale '{scale}': {total} runs** (each cell to {SEEDS_COMPARED} seeds for Table 1 and "
            f"where a claim compares it, more where an inconclusive comparison needs them to detect the paper's own "
            f"difference, {SEEDS_ELSEWHERE} elsewhere; `lnrepro reproduce N --scale {scale} --plan` prices them on "
            "your machine)")
    return "\n".join([head, "", *lines] if total else [head]) + "\n"


def restart(row: dict, asked: dict[str, dict]) -> str:
    """Where a claim was judged at an older model-code version than runs train today, its runs start today's
    version's first look ("" otherwise)."""
    versions = {cell: v for cell, v in (row.get("versions") or {}).items()
                if cell in asked and v != asked[cell]["version"]}
    if not versions:
        return ""
    older = sorted(set(versions.values())) if len(set(versions.values())) == 1 else \
        sorted(f"{v} ({cell})" for cell, v in versions.items())
    today = sorted({asked[c]["version"] for c in asked})
    return f"judged at model code {', '.join(older)}; runs today train {', '.join(today)}, whose first look they start"


def render_findings(results_dir: Path, scale: str) -> str:
    """One section per task: its verdict counts, then each claim under its verdict with the test that decided it
    and the runs it still needs."""
    results_dir = Path(results_dir)
    rows = {r["claim"]: r for r in evaluate_claims(results_dir, scale)}
    records, _ = judged_records(results_dir, scale)
    missing = {r["recipe"]: r for r in missing_runs(results_dir, scale)}
    known = machine_paces(results_dir, scale)
    out = []
    for task, heading in TASKS:
        claims = [c for c in CLAIMS if task_folder(c.a) == task]
        judged = [rows[c.text] for c in claims]
        out += [f"**{heading}**: {verdict_counts(judged)}", ""]
        for verdict in ORDER:
            for claim in (c for c in claims if rows[c.text]["verdict"] == verdict):
                row, cells = rows[claim.text], claim_cells(claim)
                asked = claim_missing(row, cells, missing)
                parts = [reason(row), restart(row, asked), needs(cells, asked, results_dir, scale, known)]
                detail = "; ".join(p for p in parts if p)
                out.append(f"- {verdict}: {claim.text} ({claim.source})" + (f": {escape(detail)}" if detail else ""))
        failed = failed_cells(records, task)
        if failed:
            out.append(f"- runs that failed, as the judging rules read them: {escape(failed)}")
        out.append("")
    return "\n".join(out)


def short_reason(reason: str) -> str:
    """A failure's first words: "loss exploded" of "loss exploded to 106.584 at update 300 (...)"."""
    words = re.match(r"[^\d(:]*", reason).group().split()
    while words and words[-1] in ("to", "at", "by", "of", "is", "was", "became"):
        words.pop()
    return " ".join(words) or reason


def failed_cells(records: dict[str, list[dict]], task: str) -> str:
    """Each cell of `task` with failed seeds: how many of its seeds, and why (the rules' first words), the paper's
    own method first; "" when none failed."""
    cells = []
    for name in sorted(records, key=lambda n: (not n.endswith("-b2t"), n)):
        if task_folder(name) != task:
            continue
        failed = [r for r in records[name] if r["status"] == "failed"]
        if failed:
            why = sorted({short_reason(r.get("reason", "")) for r in failed})
            mine = " (the paper's B2T connection)" if name.endswith("-b2t") else ""
            seeds = len(records[name])
            cells.append(f"{name}{mine}: {len(failed)} of {seeds} seed{'s' if seeds > 1 else ''} "
                         f"({'; '.join(why)})")
    return ", ".join(cells)
