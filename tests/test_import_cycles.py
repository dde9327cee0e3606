"""No import circles anywhere in the tree: the package, tools/ and bench/ (a circle means two
concepts that cannot be told apart, and a module that works only when imported in the right
order).

The check builds the import graph the contracts use (grimp, import-linter's engine) over a
copy of the package and tools/ (a namespace package: tests import ``tools.kube_cluster``);
bench/'s scripts import each other by bare name (bench/ is on sys.path when one runs), so
their graph is read from their import statements. Planted circles prove each check can fail.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Tarjan's strongly connected components over grimp's graph: every component of more than one
# module is an import circle. grimp counts imports under TYPE_CHECKING like any other, so a
# circle closed only by a type-only import is reported too.
_FIND = """
import json, sys
import grimp
sys.setrecursionlimit(20000)
g = grimp.build_graph(*sys.argv[1:], cache_dir=None)
index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
def visit(v):
    index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
    for w in g.find_modules_directly_imported_by(v):
        if w not in g.modules:
            continue
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            out.append(sorted(comp))
for m in sorted(g.modules):
    if m not in index:
        visit(m)
print(json.dumps(out))
"""


PACKAGES = ("headrace", "tools")


def _circles(tree: Path) -> list[list[str]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    run = subprocess.run([sys.executable, "-c", _FIND, *PACKAGES], cwd=tree, env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(run.stdout)


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "tree"
    for name in (*PACKAGES, "bench"):
        shutil.copytree(ROOT / name, dst / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.sh", "*.md"))
    return dst


def _script_circles(folder: Path) -> list[list[str]]:
    """Circles among the scripts of ``folder`` that import each other by bare name (any
    import statement, a function's included: it runs when the function does)."""
    names = {p.stem for p in folder.glob("*.py")}
    edges: dict[str, set[str]] = {}
    for name in names:
        found = edges.setdefault(name, set())
        for node in ast.walk(ast.parse((folder / f"{name}.py").read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names} & names
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found |= {node.module.split(".")[0]} & names
    return _components(edges)


def _components(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one node, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_package_and_tools_have_no_import_circles(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    assert _circles(tree) == []
    assert _script_circles(tree / "bench") == []


def test_a_planted_circle_is_found(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    low = tree / "headrace/core/naming.py"  # core imports nothing above it
    low.write_text(low.read_text() + "\nimport headrace.core.files  # planted\n")
    high = tree / "headrace/core/files.py"
    high.write_text(high.read_text() + "\nimport headrace.core.naming  # planted\n")
    assert ["headrace.core.files", "headrace.core.naming"] in _circles(tree)


def test_a_planted_circle_in_tools_is_found(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    # The circle tools had: the cluster starting the controllers that build on it.
    cluster = tree / "tools/kube_cluster.py"
    cluster.write_text(cluster.read_text() + "\nimport tools.kueue  # planted\n")
    assert ["tools.kube_cluster", "tools.kueue", "tools.webhook_controller"] in _circles(tree)


def test_a_planted_circle_in_bench_is_found(tmp_path: Path) -> None:
    bench = _copy(tmp_path) / "bench"
    scoring = bench / "bench_scoring.py"  # _common imports it
    scoring.write_text(scoring.read_text() + "\n\ndef _planted() -> None:\n    import _common\n")
    assert ["_common", "bench_scoring"] in _script_circles(bench)
