"""What the evidence still needs: the seeds each cell lacks (five where Table 1 or a claim compares it, more where an
inconclusive comparison's power asks, three elsewhere), and of those the runs one claim's own verdict asks for.
The runs page, the findings and the queue all read it, so they never disagree about what is missing."""

from __future__ import annotations

from pathlib import Path

from repro.claims import CLAIMS
from repro.judging import LOOKS, MIN_SEEDS_FAILURE
from repro.model import version as model_code
from repro.results import current_records
from repro.tables.spec import SPECS
from repro.verdicts import evaluate_claims


# Seeds a cell needs (2026-11-30): at least five for every cell of Table 1 and every cell a claim compares, and more
# where a comparison under the current judging rules is inconclusive and would detect the paper's own difference
# with their power only on more (repro/judging.py: seeds_needed); three elsewhere.
SEEDS_COMPARED, SEEDS_ELSEWHERE = 5, 3
COMPARED_TABLES = (1,)


def compared_cells() -> set[str]:
    """The recipes the claims compare or judge (the figure-3 claim reads figure data, not a cell)."""
    return {name for c in CLAIMS if c.kind != "figure3" for name in (c.a, *c.b.split(",")) if name}


def claim_power(row: dict) -> dict[str, int]:
    """Per cell, the most seeds one claim's inconclusive comparisons (a row of evaluate_claims) ask for to detect
    the paper's own difference."""
    out: dict[str, int] = {}
    for comparison in row.get("comparisons", []):
        n = (comparison.get("test") or {}).get("seeds_needed")
        for name in comparison["cells"] if n else ():
            out[name] = max(out.get(name, 0), n)
    return out


def power_seeds(results_dir: Path, scale: str) -> dict[str, int]:
    """Per cell, the most seeds any claim's inconclusive comparison of it asks for (the claims as the current rules
    judge them)."""
    out: dict[str, int] = {}
    for row in evaluate_claims(results_dir, scale):
        for name, n in claim_power(row).items():
            out[name] = max(out.get(name, 0), n)
    return out


def missing_runs(results_dir: Path, scale: str) -> list[dict]:
    """Each cell short of the seeds it needs, under the first table that holds it (18L-18L B2T is Tables 1, 5
    and 9's): its table, group, method, recipe, how many it needs and whether its claims' power asks for more than
    the least, and the `lnrepro reproduce` command that makes them (done seeds are skipped by it).

    Seeds count at the model-code version a run trains today (`version`; `have` of them): a record of an older
    version keeps its seed and its place in the tables, but a comparison takes one version (repro/judging.py), so
    the seeds still to run are new ones, the lowest numbers no record of the cell holds (`older`: the records of
    other versions)."""
    from itertools import count, islice

    current, stale = current_records(results_dir, scale)
    compared = compared_cells()
    power = power_seeds(results_dir, scale)
    seen, out = set(), []
    for number, spec in sorted(SPECS.items()):
        for group, methods in spec.groups.items():
            for method in methods:
                name = spec.recipe_name(group, method)
                if name in seen:
                    continue
                seen.add(name)
                needed = SEEDS_COMPARED if number in COMPARED_TABLES or name in compared else SEEDS_ELSEWHERE
                by_power = power.get(name, 0) > needed
                needed = max(needed, power.get(name, 0))
                now = model_code.current(method)
                records = current.get(name, [])
                have = {r["seed"] for r in records if model_code.of_record(r) == now}
                used = {r["seed"] for r in records + stale.get(name, [])}
                seeds = list(islice((s for s in count(1) if s not in used), max(0, needed - len(have))))
                if seeds:
                    out.append({"table": number, "task": spec.recipe_folder or "mt", "group": group, "method": method, "recipe": name,
                                "seeds": seeds, "needed": needed, "by_power": by_power, "version": now,
                                "have": len(have), "older": len(records) - len(have),
                                "command": f"lnrepro reproduce {number} --scale {scale} --seeds {max(seeds)} "
                                           f"--cells {group}:{method}"})
    return out


def seed_span(seeds: list[int]) -> str:
    """"1, 2, 3" for a few seeds; "4-176" for a long run of them."""
    if len(seeds) > 3 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def claim_missing(row: dict, cells: list[str], missing: dict[str, dict]) -> dict[str, dict]:
    """The runs one claim's own verdict still needs, of those its cells lack (`missing`, by recipe: the seeds each
    cell lacks for every claim that reads it, at the model-code version runs train today): a claim not yet run its
    first look's seeds; an inconclusive one the seeds of its next planned look (a failure claim its minimum), or,
    where it was judged at an older version than today's, the first look's at today's; a claim decided, or not
    decidable at this scale, none (rules v3)."""
    if row["verdict"] not in ("inconclusive", "not run"):
        return {}
    power = claim_power(row)
    least = MIN_SEEDS_FAILURE if "failed" in (row.get("test") or {}) else LOOKS[0]
    out = {}
    for cell in cells:
        if cell in missing:
            m = missing[cell]
            today = row.get("model_code") != "mixed" and (row.get("versions") or {}).get(cell, m["version"]) == \
                m["version"]
            target = max(least, power.get(cell, 0)) if today else least
            seeds = m["seeds"][:max(0, target - m["have"])]
            if seeds:
                out[cell] = {**m, "seeds": seeds}
    return out
