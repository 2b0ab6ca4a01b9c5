"""The README's results section shows what the committed records say: each table block and the claims block are
the commands' own output, so a record added without regenerating them fails here."""

import re
from pathlib import Path

import pytest
from rich.console import Console

import repro.progress
from repro.claims import render_changed, render_claims
from repro.tables.render import render_table, table_rows
from repro.tables.runs import render_missing, render_runs
from repro.tables.spec import SPECS

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
RESULTS = REPO / "results"


def _section(heading: str) -> str:
    """The text under the first '### ' heading that starts with `heading`, up to the next heading."""
    m = re.search(rf"^### {re.escape(heading)}.*?$(.*?)(?=^##)", README, flags=re.M | re.S)
    return m.group(1) if m else ""


def _block(text: str, caption: str, row: str = "|") -> str:
    """A command's Markdown output as the README holds it: the caption line starting with `caption`, the blank line
    after it and the lines starting with `row` that follow ("" when there is no such caption)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(caption)), None)
    if start is None:
        return ""
    end = start + 2
    while end < len(lines) and lines[end].startswith(row):
        end += 1
    if row == "|" and end + 1 < len(lines) and not lines[end] and lines[end + 1].startswith("- "):
        end += 1  # the table's notes: its failed seeds with their reasons, its stale cells
        while end < len(lines) and lines[end].startswith("- "):
            end += 1
    return "\n".join(lines[start:end])


RESULTS_SECTION = README.split("## Results at reduced scale", 1)[-1]


@pytest.mark.parametrize("number", sorted(SPECS))
def test_readme_table_block_is_the_command_output(number):
    _, _, rows = table_rows(number, "mini", RESULTS)
    section = _section(f"Table {number} at mini scale")
    if all(r["status"] == "not run" for r in rows):
        assert not section, f"README shows Table {number} at mini, but no mini record fills it"
        return
    assert section, f"README has no '### Table {number} at mini scale' section, though records fill it"
    expected = render_table(number, "mini", "markdown", RESULTS).strip()
    assert _block(section, f"**Table {number}:") == expected, (
        f"README's Table {number} block differs from `lnrepro table {number} --scale mini --format markdown`:\n"
        + expected)


def test_readme_claims_block_is_the_command_output(monkeypatch):
    monkeypatch.setattr(repro.progress, "console", Console(stderr=True, force_terminal=False))
    expected = render_claims(RESULTS, "mini", "text")
    m = re.search(r"```\n(The paper's claims at scale 'mini'.*?)```", _section("Claims, as"), flags=re.S)
    assert m, "README's claims section has no fenced `lnrepro claims --scale mini` output"
    assert m.group(1) == expected, "README's claims block differs from `lnrepro claims --scale mini`:\n" + expected


def test_readme_changed_verdicts_block_is_the_command_output():
    """Which verdicts changed from judging rules v1 to v2 is `lnrepro claims --changed`'s own table."""
    block = _block(RESULTS_SECTION, "**Verdicts at scale 'mini' that changed")
    assert block, "README's results section has no `lnrepro claims --scale mini --changed` block"
    assert block == render_changed(RESULTS, "mini").strip(), (
        "README's changed-verdicts block differs from `lnrepro claims --scale mini --changed`:\n"
        + render_changed(RESULTS, "mini"))


def test_readme_runs_block_is_the_command_output():
    """The list of runs made is `lnrepro runs`'s own: a record added without it, or a run named but not recorded,
    fails here."""
    block = _block(RESULTS_SECTION, "**Runs at scale 'mini'")
    assert block, "README's results section has no `lnrepro runs --scale mini --format markdown` block"
    expected = render_runs(RESULTS, "mini", "markdown").strip()
    assert block == expected, (
        "README's runs block differs from `lnrepro runs --scale mini --format markdown`:\n" + expected)


def test_readme_still_to_run_is_the_command_output():
    """What is missing is listed as `lnrepro runs --missing` finds it: a run recorded but still listed, or a cell
    short of its seeds but not listed, fails here."""
    block = _block(RESULTS_SECTION, "**Still to run at scale 'mini'", row="- ")
    assert block, "README's results section has no `lnrepro runs --scale mini --missing` block"
    expected = render_missing(RESULTS, "mini", "markdown").strip()
    assert block == expected, (
        "README's still-to-run block differs from `lnrepro runs --scale mini --missing`:\n" + expected)
