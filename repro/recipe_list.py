"""`lnrepro recipes`: every recipe below a folder with its task, variant, depths and the scales it defines, and with
`--check` every one of them loaded at every scale (a RecipeError names the first that does not)."""

from __future__ import annotations

from pathlib import Path

from repro.config import SCALES, load_raw, resolve


def recipe_files(folder: Path) -> list[Path]:
    """The recipes below `folder`: not the `base:` files they merge, nor the calibration grids' specs."""
    return sorted(p for p in folder.rglob("*.yaml") if not {"base", "calibration"} & set(p.relative_to(folder).parts))


def list_recipes(folder: Path, check: bool) -> str:
    """The listing, plain and aligned: a recipe's path (below the folder named above it) is never cut, whatever the
    terminal's width."""
    from repro.tables.render import plain_table
    files = recipe_files(folder)
    if not files:
        raise ValueError(f"{folder}: no recipes found")
    rows = []
    for p in files:
        res = resolve(p)
        scales = [s for s in SCALES[1:] if s in (load_raw(p).get("scales") or {})]
        for s in scales if check else ():
            resolve(p, s)
        m = res.recipe.model
        depth = f"{m.decoder_layers}L" if res.recipe.task == "lm" else f"{m.encoder_layers}L-{m.decoder_layers}L"
        rows.append([str(p.relative_to(folder)), res.recipe.task, m.variant, depth, ",".join(scales) or "-"])
    return (f"{len(files)} recipes in {folder}/, each at paper scale and the scales listed\n\n"
            + plain_table(["recipe", "task", "variant", "depth", "scales"], rows))
