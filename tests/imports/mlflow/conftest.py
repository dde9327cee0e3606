"""A real MLflow tracking server and registry for the session (``tools/mlflow_server.py``,
SQLite store and proxied artifacts in a temp dir), and models logged to it by MLflow's own
client (``mlflow_log_models.py``, run under the server's interpreter). Tests that need them
skip, saying why, where the server's environment (``.venv-mlflow``, made by ``./dev``) is
missing."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tools.mlflow_server import MlflowServer, mlflow_python, why_unavailable

LOGGER = Path(__file__).with_name("mlflow_log_models.py")
FLAVORS = ("sklearn", "xgboost", "lightgbm", "onnx")


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    why = why_unavailable()
    if why:
        pytest.skip(why)
    with MlflowServer(tmp_path_factory.mktemp("mlflow")) as server:
        yield server


@dataclass(frozen=True)
class Logged:
    rows: dict[str, list[float]]  # column -> values: the rows the references were made on
    models: dict[str, dict[str, Any]]  # flavor -> run_id, name, version, proba


@pytest.fixture(scope="session")
def logged_models(mlflow_server: MlflowServer, tmp_path_factory: pytest.TempPathFactory
                  ) -> Logged:
    """One model a flavor, logged, registered (version 1) and aliased ``champion`` by
    MLflow's own client, with the producer's own predictions on the reference rows."""
    out = tmp_path_factory.mktemp("logged") / "models.json"
    prefix = "m" + uuid.uuid4().hex[:8]
    python = mlflow_python()
    assert python is not None
    done = subprocess.run([str(python), str(LOGGER), mlflow_server.url, prefix,
                           ",".join(FLAVORS), str(out)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    return Logged(doc["rows"], doc["models"])
