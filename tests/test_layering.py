"""The import-linter contracts catch a forbidden import wherever it is planted.

Each case copies the package and ``pyproject.toml`` to a temp dir, adds one import the README
forbids to a module that is not that library's home, and runs ``lint-imports`` on the copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")

PLANTS = [
    ("headrace/core/errors.py", "tensorflow"),
    ("headrace/store/dfs.py", "mxnet"),
    ("headrace/scorers/engine/batching.py", "keras"),
    # Every ML library has its homes; a module elsewhere is caught without being listed.
    ("headrace/ops/demo.py", "torch"),
    ("headrace/scorers/engine/core.py", "torch"),
    ("headrace/trainers/onnx_export.py", "torchvision"),
    ("headrace/store/versions.py", "onnxruntime"),
    ("headrace/scorers/adapters/pytorch.py", "lightgbm"),
    ("headrace/trainers/jobs.py", "mlflow"),
    ("headrace/codecs/registry.py", "jax"),
    ("headrace/scorers/engine/batching.py", "fastavro"),
    ("headrace/scorers/engine/worker.py", "aiokafka"),
    ("headrace/trainers/jobs.py", "confluent_kafka"),
    ("headrace/ops/demo.py", "faust"),
    ("headrace/trainers/control/plane.py", "faust"),
    ("headrace/cli/_context.py", "kafka"),
    ("headrace/ops/demo.py", "kubernetes"),
    ("headrace/scorers/engine/worker.py", "kubernetes"),
    ("headrace/topology/commands.py", "helm_python"),
    ("headrace/scorers/engine/worker.py", "headrace.scorers.rollout.canary"),
    ("headrace/scorers/engine/core.py", "headrace.rollout.routing"),
    # The scorer's packages: engine over adapters over wire (layers), and no plug-in below the
    # package root (forbidden, not even indirectly).
    ("headrace/scorers/wire/decoding.py", "headrace.scorers.engine.batching"),
    ("headrace/scorers/adapters/precision.py", "headrace.scorers.engine.sizing"),
    ("headrace/scorers/wire/encoding.py", "headrace.scorers.adapters.precision"),
    ("headrace/scorers/engine/worker.py", "headrace.scorers.tap_registry"),
    ("headrace/scorers/wire/buffers.py", "headrace.scorers.lineage_tap"),
    ("headrace/trainers/job_process.py", "headrace.trainers.tuning.pruning"),
    ("headrace/trainers/job_run/training.py", "headrace.trainers.stop_rules"),
]


def _copy_tree(tmp_path: Path) -> Path:
    dst = tmp_path / "tree"
    shutil.copytree(ROOT / "headrace", dst / "headrace",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", dst / "pyproject.toml")
    return dst


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(LINT), "--no-cache"], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_contracts_pass_on_the_unmodified_tree(tmp_path: Path) -> None:
    result = _lint(_copy_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(("module", "library"), PLANTS, ids=[f"{m}:{lib}" for m, lib in PLANTS])
def test_a_planted_forbidden_import_breaks_the_contracts(tmp_path: Path, module: str,
                                                         library: str) -> None:
    tree = _copy_tree(tmp_path)
    target = tree / module
    target.write_text(target.read_text() + f"\nimport {library}  # planted\n")
    result = _lint(tree)
    assert result.returncode != 0, result.stdout
    dotted = module.removesuffix(".py").replace("/", ".")
    assert f"{dotted} -> {library}" in result.stdout, result.stdout
