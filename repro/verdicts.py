"""The claims' verdicts under a version of the judging rules (v1, v2, v3, and v4 in force), the verdicts that
changed between two versions, and their rendering: the claims and their readers are in repro/claims.py, the live
rules' judgement (v3's, and v4's looks) in repro/claims_v3.py."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from repro import claims_v1, claims_v2, claims_v3, judging
from repro.claims import CLAIMS, not_informative, rules_line, task_folder, verdict_counts
from repro.markdown import escape
from repro.progress import console
from repro.references import load_references


def evaluate_claims(results_dir: Path, scale: str, rules: str = judging.CURRENT) -> list[dict]:
    records, stale = judging.judged_records(results_dir, scale, rules)
    figures = Path(results_dir) / "figures"
    uninformative = not_informative(results_dir, scale) if rules != "v1" else {}
    references = load_references(results_dir) if rules in judging.LOOKED else {}
    refs_of = lambda r: judging.references_for(r, references)
    rows = []
    for c in CLAIMS:
        if rules in judging.LOOKED and not (c.a and task_folder(c.a) in uninformative):
            rows.append({"claim": c.text, "source": c.source,
                         **claims_v3.judge(c, records, stale, figures, scale, refs_of, rules == "v4")})
        elif rules == "v1":
            verdict, evidence = claims_v1.judge(c, records, figures, scale)
            rows.append({"claim": c.text, "source": c.source, "verdict": verdict, "evidence": evidence})
        elif c.a and task_folder(c.a) in uninformative:
            rows.append({"claim": c.text, "source": c.source, "verdict": "not informative", "evidence":
                         f"calibration v2 found {task_folder(c.a)} not informative at {scale}: "
                         f"{uninformative[task_folder(c.a)]}"})
        else:
            rows.append({"claim": c.text, "source": c.source, **claims_v2.judge(c, records, stale, figures, scale)})
    for row, c in zip(rows, CLAIMS):  # one row a claim
        if c.kind == "figure3":  # gradients at initialisation: no run, the same verdict at every scale
            row["scale_free"] = True
    if rules in judging.LOOKED:
        claims_v3.adjust_across(rows)
    return rows


def changed_verdicts(results_dir: Path, scale: str, old: str = "v1", new: str = judging.CURRENT) -> list[dict]:
    """The claims whose verdict differs between two versions of the rules, with both verdicts and the new
    evidence."""
    before = {r["claim"]: r for r in evaluate_claims(results_dir, scale, old)}
    return [{"claim": r["claim"], old: before[r["claim"]]["verdict"], new: r["verdict"], "evidence": r["evidence"]}
            for r in evaluate_claims(results_dir, scale, new) if before[r["claim"]]["verdict"] != r["verdict"]]


def render_changed(results_dir: Path, scale: str, old: str = "v1", new: str = judging.CURRENT,
                   fmt: str = "markdown") -> str:
    """The changed verdicts as a Markdown table (the results page), or as text wrapped to the terminal (`claims
    --changed`): one block per claim, its two verdicts, then the new evidence."""
    rows = changed_verdicts(results_dir, scale, old, new)
    head = f"Verdicts at scale '{scale}' that changed from rules {old} to {new}: {len(rows)}"
    if fmt == "text":
        width = max(40, min(console.width, 120))
        fill = lambda text, indent="": textwrap.fill(text, width, initial_indent=indent,
                                                     subsequent_indent=indent + "  ", break_on_hyphens=False)
        out = [fill(head), ""]
        for r in rows:
            out += [fill(f"{r['claim']}: {r[old]} -> {r[new]}"), fill(r["evidence"], "    ")]
        return "\n".join(out) + "\n"
    if not rows:
        return f"**{head}**\n"
    lines = [f"**{head}**", "",
             f"| claim | {old} | {new} | why ({new}'s evidence) |", "|---|---|---|---|"]
    lines += [f"| {r['claim']} | {r[old]} | {r[new]} | {escape(r['evidence'])} |" for r in rows]
    return "\n".join(lines) + "\n"


def render_claims(results_dir: Path, scale: str, fmt: str = "text", rules: str = judging.CURRENT) -> str | None:
    """text: a rich table on a wide terminal, else one compact block per claim; markdown; json."""
    rows = evaluate_claims(results_dir, scale, rules)
    counts = verdict_counts(rows)
    if fmt == "json":
        return json.dumps({"scale": scale, "results": str(results_dir), "rules": rules,
                           "rules_date": judging.RULES[rules], "claims": rows}, indent=2) + "\n"
    if fmt == "markdown":
        lines = [f"Claims at scale '{scale}' under {rules_line(rules)}: {counts}.", ""]
        if rules in judging.LOOKED:  # its look, its model-code version, and p beside its table's adjusted ones
            f = lambda x: "—" if x is None else f"{x:.3f}"
            lines += ["| claim | paper | verdict | look | model code | p | Holm | BH | evidence |",
                      "|---|---|---|---|---|---|---|---|---|"]
            lines += [f"| {r['claim']} | {r['source']} | {r['verdict']} | {r.get('look', '—')} | "
                      f"{r.get('model_code') or '—'} | {f(r.get('p'))} | {f(r.get('p_holm'))} | {f(r.get('p_bh'))} | "
                      f"{escape(r['evidence'])} |" for r in rows]
        else:
            lines += ["| claim | paper | verdict | evidence |", "|---|---|---|---|"]
            lines += [f"| {r['claim']} | {r['source']} | {r['verdict']} | {escape(r['evidence'])} |" for r in rows]
        return "\n".join(lines) + "\n"
    if fmt != "text":
        raise ValueError(f"--format {fmt!r}: expected text, markdown or json")
    if console.is_terminal and console.width >= 140:
        from rich.table import Table
        from rich.text import Text
        t = Table(title=f"The paper's claims at scale '{scale}' ({counts}); {rules_line(rules)}")
        for col in ("claim", "paper", "verdict", "evidence"):
            t.add_column(col)
        colour = {"reproduced": "green", "not reproduced": "red", "inconclusive": "yellow", "not run": "dim",
                  "not informative": "dim", "smaller than the paper's": "magenta",
                  "not decidable at this scale": "dim"}
        for r in rows:
            t.add_row(Text(r["claim"]), Text(r["source"]), Text(r["verdict"], style=colour[r["verdict"]]),
                      Text(r["evidence"]))
        console.print(t)
        return None
    width = max(40, min(console.width, 120))  # the terminal's ($COLUMNS), never wider than it
    fill = lambda text, indent="": textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent + "  ",
                                                 break_on_hyphens=False, break_long_words=True)
    out = [fill(f"The paper's claims at scale '{scale}': {counts}"), fill(f"({rules_line(rules)})"), ""]
    for r in rows:
        where = ", ".join(x for x in (f"look {r['look']}" if "look" in r else "",
                                      f"model code {r['model_code']}" if r.get("model_code") else "") if x)
        out += [fill(f"[{r['verdict']}] {r['claim']} ({r['source']}{'; ' + where if where else ''})"),
                fill(r["evidence"], "    ")]
    return "\n".join(out) + "\n"


def render_verdicts(results_dir: Path, scale: str, fmt: str, rules: str | None, changed: bool) -> str | None:
    """`lnrepro claims`: every claim's verdict under `rules` (default the current version), or with `changed` the
    verdicts that changed from the version before it."""
    rules = rules or judging.CURRENT
    if rules not in judging.RULES:
        raise ValueError(f"--rules {rules!r}: expected one of {', '.join(judging.RULES)}")
    versions = list(judging.RULES)
    if changed and rules == versions[0]:
        raise ValueError(f"--changed --rules {rules}: {rules} is the first version; nothing came before it")
    if changed:
        return render_changed(results_dir, scale, versions[versions.index(rules) - 1], rules,
                              "markdown" if fmt == "markdown" else "text")
    return render_claims(results_dir, scale, fmt, rules)
