"""`lnrepro curves RUN_DIR...`: the training loss and validation NLL of any runs, side by side in one PNG, read from
their `log.jsonl` (a record's copy, `seedN.log.jsonl`, works as well)."""

from __future__ import annotations

from pathlib import Path

from repro.figures.output import save_figure


def log_file(path: Path) -> Path:
    path = Path(path)
    log = path / "log.jsonl" if path.is_dir() else path
    if not log.is_file():
        raise ValueError(f"{path}: no log.jsonl (a run directory of `lnrepro train`, or a record's .log.jsonl)")
    if log.suffix == ".json":  # a record (seedN.json), not the log beside it: its one line would read as garbled
        beside = log.with_name(log.stem + ".log.jsonl")
        raise ValueError(f"{path}: a JSON file, not a log" + (f"; its log is {beside}" if beside.is_file() else
                                                              " (a run directory, or a record's .log.jsonl)"))
    return log


def read_log(path: Path) -> list[dict]:
    """A run's log rows: `path` is a run directory or a log file; a garbled line names the file."""
    from repro.files import read_jsonl
    return read_jsonl(log_file(path))


def ended_failed(path: Path) -> bool:
    """Whether the run of `path` ended failed: as its status.json says (a run directory), or as the judging rules
    read its record (a record's log: a run that learned nothing has failed), against the references of the results
    folder it sits in. A file that cannot be read says nothing."""
    from repro.judging import judge_record, references_for
    from repro.references import REFERENCES, load_references
    from repro.results import RESULTS_DIR
    from repro.files import read_json
    path = Path(path)
    status = path / "status.json" if path.is_dir() else path.with_name(path.name.replace(".log.jsonl", ".json"))
    try:
        data = read_json(status) if status.is_file() else {}
    except ValueError:
        return False
    if not isinstance(data, dict) or path.is_dir() or data.get("status") != "completed":
        return isinstance(data, dict) and data.get("status") == "failed"
    results = next((d for d in path.resolve().parents if (d / REFERENCES).is_dir()), Path(RESULTS_DIR))
    return judge_record(data, references_for(data, load_references(results)))[0] == "failed"


def series(rows: list, key: str, log: Path) -> list[tuple[int, float]]:
    """(update, value) of every row that has `key`; a row that is not a log row (not a mapping, no whole update,
    a value that is not a number) is a one-line ValueError naming the file and the line. Infinity and NaN stay:
    a diverged run shows where it left the plot."""
    out = []
    for i, r in enumerate(rows, 1):
        if not isinstance(r, dict):
            raise ValueError(f"{log}: line {i} is not a log row (a JSON {type(r).__name__})")
        if key not in r:
            continue
        step, value = r.get("step"), r[key]
        if not (isinstance(step, int) and not isinstance(step, bool) and step >= 0
                and isinstance(value, (int, float)) and not isinstance(value, bool)):
            raise ValueError(f"{log}: line {i} is no log row ({key} {value!r} at step {step!r})")
        out.append((step, float(value)))
    return out


def draw_curves(paths: list[Path], out: Path, json_path: Path | None = None) -> dict:
    """Training loss (left) and validation NLL (right) against updates, one line per run, named by its folder; a
    run that ended failed is dashed and named so."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from repro.figures.output import check_targets
    logs = [log_file(p) for p in paths]
    check_targets(Path(out), json_path, tuple(logs))
    data = {}
    for p, log in zip(paths, logs):
        rows = read_log(p)
        p = Path(p)
        name = p.name if p.is_dir() else f"{p.parent.name}/{p.name.replace('.log.jsonl', '')}"  # a record's log
        if ended_failed(p):
            name += " (failed)"
        while name in data:
            name += "'"
        data[name] = {"loss": series(rows, "loss", log), "valid_nll": series(rows, "valid_nll", log)}
    if not any(c["loss"] or c["valid_nll"] for c in data.values()):
        raise ValueError(f"{', '.join(map(str, logs))}: no training loss or validation row to draw")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, label in ((axes[0], "loss", "training loss (label-smoothed, nats)"),
                           (axes[1], "valid_nll", "validation NLL (nats)")):
        for name, curves in data.items():
            if curves[key]:
                xs, ys = zip(*curves[key])
                ax.plot(xs, ys, label=name, marker="o" if key == "valid_nll" else None, markersize=3,
                        linestyle="--" if name.endswith(("(failed)", "(failed)'")) else "-")
        ax.set_xlabel("updates")
        ax.set_ylabel(label)
        if ax.lines:  # a side no run logged stays empty, without a legend
            ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out, json_path, data, tuple(logs))
    return data
