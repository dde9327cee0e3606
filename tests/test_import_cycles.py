"""No import circles among the package's modules (a circle means two concepts that cannot be
told apart, and a module that works only when imported in the right order).

The check builds the import graph the contracts use (grimp, import-linter's engine) over a
copy of the tree, so a planted circle proves it can fail.
"""

from __future__ import annotations

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
g = grimp.build_graph("headrace", cache_dir=None)
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


def _circles(tree: Path) -> list[list[str]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    run = subprocess.run([sys.executable, "-c", _FIND], cwd=tree, env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(run.stdout)


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "tree"
    shutil.copytree(ROOT / "headrace", dst / "headrace",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dst


def test_the_package_has_no_import_circles(tmp_path: Path) -> None:
    assert _circles(_copy(tmp_path)) == []


def test_a_planted_circle_is_found(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    low = tree / "headrace/core/naming.py"  # core imports nothing above it
    low.write_text(low.read_text() + "\nimport headrace.core.files  # planted\n")
    high = tree / "headrace/core/files.py"
    high.write_text(high.read_text() + "\nimport headrace.core.naming  # planted\n")
    assert ["headrace.core.files", "headrace.core.naming"] in _circles(tree)
