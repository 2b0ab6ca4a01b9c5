"""The two wings of docs/code-map.md, held: the training wing never imports the evidence wing (records, in
repro/results.py, are what they share), and the evidence wing loads neither torch nor the training loop until a
record asks for it."""

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAINING = ["repro/train", "repro/model", "repro/eval", "repro/data", "repro/config.py", "repro/files.py",
            "repro/checksum.py", "repro/provenance.py", "repro/options.py", "repro/training_run.py"]
EVIDENCE = ["repro.results", "repro.references", "repro.judging", "repro.claims", "repro.claims_v3",
            "repro.verdicts", "repro.findings", "repro.queue", "repro.report", "repro.run_list", "repro.tables.render",
            "repro.pace", "repro.needed"]


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:  # `from repro import x` imports repro.x
            names.update([node.module, *(f"{node.module}.{a.name}" for a in node.names)])
    return names


def test_the_training_wing_never_imports_the_evidence_wing():
    files = [p for entry in TRAINING for p in ([REPO / entry] if entry.endswith(".py") else
                                               sorted((REPO / entry).rglob("*.py")))]
    assert len(files) > 20
    judging = [e for e in EVIDENCE if e not in ("repro.results", "repro.references")] + ["repro.tables",
                                                                                       "repro.calibration"]
    bad = {f"{p.relative_to(REPO)}: {m}" for p in files for m in imported(p)
           if any(m == e or m.startswith(e + ".") for e in judging)}
    assert not bad, sorted(bad)


def test_the_evidence_wing_loads_no_training_code_at_import():
    code = ("import sys\n" + "".join(f"import {m}\n" for m in EVIDENCE)
            + "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith(('repro.train', "
              "'repro.model.block', 'repro.eval.evaluate'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def module_imports() -> dict[str, set[str]]:
    """Each module of repro/ and the modules of repro/ it imports, anywhere in it (inside functions too)."""
    files = {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (REPO / "repro").rglob("*.py")}
    return {name: {t for t in imported(path) if t in files and t != name} for name, path in files.items()}


def test_no_module_imports_one_that_imports_it_back():
    """The import graph has no cycle, directly or through other modules, function-level imports included."""
    graph = module_imports()
    reach = {}

    def reachable(m: str) -> set[str]:
        if m not in reach:
            reach[m] = set()
            todo = list(graph[m])
            while todo:
                n = todo.pop()
                if n not in reach[m]:
                    reach[m].add(n)
                    todo.extend(graph[n])
        return reach[m]
    cycles = sorted(f"{m} -> {n} -> ... -> {m}" for m in graph for n in graph[m] if m in reachable(n))
    assert not cycles, cycles
