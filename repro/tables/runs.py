"""Every run behind a scale's tables, one row per record: what it was, how it ended, where and how long it ran.

Read from the records alone (the current recipe's, as tables read them), so the list of runs made can never
disagree with the numbers the tables show.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from repro.results import current_records

RUN_FORMATS = ("text", "markdown", "csv", "json")
COLUMNS = ("Recipe", "Seed", "Status", "Updates", "Training", "Evaluation", "Machine", "Stretches", "Started",
           "Commit")


def where(hardware: dict) -> str:
    """A machine in words: its GPUs by name, or its CPU with the vector kernels torch used and the family/model
    (one CPU name can hide generations of different speed), with the core count."""
    cores = f"{hardware.get('cpu_count', '?')} cores"
    if hardware.get("gpus"):
        return f"{hardware['gpus']} x {hardware.get('device', 'GPU')}, {cores}"
    cpu = hardware.get("cpu") or hardware.get("device") or "CPU"
    return ", ".join(part for part in (cpu, hardware.get("cpu_id", ""), cores) if part)


def run_rows(results_dir: Path, scale: str) -> list[dict]:
    """One row per current record, by recipe then seed; seconds stay seconds (the formats round them)."""
    current, _ = current_records(results_dir, scale)
    rows = []
    for name in sorted(current):
        for rec in sorted(current[name], key=lambda r: r["seed"]):
            metrics = rec.get("metrics") or {}
            trained_on = where(rec.get("hardware") or {})
            evaluated_on = where(metrics["eval_hardware"]) if metrics.get("eval_hardware") else trained_on
            rows.append({"recipe": name, "seed": rec["seed"], "status": rec["status"], "reason": rec.get("reason", ""),
                         "updates": rec.get("updates"), "training_s": rec.get("duration_s"),
                         "evaluation_s": metrics.get("eval_seconds"), "machine": trained_on,
                         "evaluated_on": evaluated_on, "stretches": len(rec.get("segments") or []) or 1,
                         "started": rec.get("started", ""), "commit": str(rec.get("commit", ""))[:12]})
    return rows


def _minutes(seconds) -> str:
    return "?" if seconds is None else f"{seconds / 60:.0f} min"


def _cells(row: dict) -> list[str]:
    evaluation = "none" if row["evaluation_s"] is None else f"{row['evaluation_s']:.0f} s"
    if row["evaluation_s"] is not None and row["evaluated_on"] != row["machine"]:
        evaluation += f" on {row['evaluated_on']}"
    return [row["recipe"], str(row["seed"]), row["status"], str(row["updates"] or "?"), _minutes(row["training_s"]),
            evaluation, row["machine"], str(row["stretches"]), row["started"][:10], row["commit"][:7]]


def render_runs(results_dir: Path, scale: str, fmt: str = "text") -> str | None:
    if fmt not in RUN_FORMATS:
        raise ValueError(f"--format {fmt!r}: expected one of {', '.join(RUN_FORMATS)}")
    rows = run_rows(results_dir, scale)
    title = f"Runs at scale '{scale}': {len(rows)} records of the current recipes"
    if fmt == "json":
        return json.dumps({"scale": scale, "rows": rows}, indent=2) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["recipe"], lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return buf.getvalue()
    if fmt == "markdown":
        lines = [f"**{title}**", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
        return "\n".join(lines) + "\n"
    from rich.table import Table

    from repro.progress import console
    table = Table(title=title)
    for column in COLUMNS:
        table.add_column(column)
    for row in rows:
        table.add_row(*_cells(row))
    if not console.is_terminal or console.measure(table).maximum > console.width:
        return render_runs(results_dir, scale, "markdown")  # piped or narrow: never truncate
    console.print(table)
    return None
