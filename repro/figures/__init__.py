"""The paper's figures as PNGs: 3, 4 and 7 from models built (and, if asked, trained) here (gradients.py), 1, 5, 6,
8 and 9 from the run records (runs.py); any runs' curves (curves.py)."""

from __future__ import annotations

from pathlib import Path

FROM_MODELS, FROM_RUNS = (3, 4, 7), (1, 5, 6, 8, 9)


def draw(number: int, out: Path, json_path: Path | None, layers: int, d_model: int, updates: int, root: Path,
         results_dir: Path, scale: str) -> None:
    """`lnrepro figure N`: one figure to `out` (and its numbers to `json_path`); a figure not drawn is a ValueError
    saying which are. The targets are checked before any model is built or record read."""
    from repro.figures.output import check_targets
    if number not in FROM_MODELS + FROM_RUNS:
        raise ValueError(f"figure {number}: " + ("the paper's figure 2 is a diagram of the layers, not a result; "
                                                 if number == 2 else "the paper's figures are 1 to 9; ")
                         + "the figures drawn are 1 and 3 to 9")
    check_targets(out, json_path)
    if number in FROM_MODELS:
        from repro.figures.gradients import figure_gradients
        figure_gradients(number, out, json_path, layers, d_model, updates, root)
    else:
        from repro.figures.runs import figure_from_runs
        from repro.options import check_results
        check_results(results_dir)
        figure_from_runs(number, out, json_path, results_dir, scale, root)
