"""Choosing a scorer runtime: read once into the settings, one adapter module per (framework,
runtime), and a model the chosen runtime cannot run refused at load with one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from headrace.core.errors import ConfigError, PermanentError
from headrace.scorers import adapters
from headrace.scorers.adapters import keras_backend
from headrace.scorers.engine.settings import load_scorer_settings
from headrace.store.manifest import Manifest
from headrace.store.signature import InputKind, ModelInput, ModelOutput, OutputKind
from tests.scorers.conftest import publish_mx

REPO = Path(__file__).resolve().parents[2]


def test_the_runtime_is_read_once_from_the_environment_and_checked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_scorer_settings().runtime == "tensorflow"
    monkeypatch.setenv("HEADRACE_SCORER_RUNTIME", "jax")
    assert load_scorer_settings().runtime == "jax"
    monkeypatch.setenv("HEADRACE_SCORER_RUNTIME", "mxnet")
    with pytest.raises(ConfigError, match="runtime") as e:
        load_scorer_settings()
    assert "\n" not in str(e.value)


def test_each_framework_and_runtime_has_its_own_adapter_module() -> None:
    assert {rt for _, rt in adapters.ADAPTERS} == set(adapters.RUNTIMES)
    for (_, _), module in adapters.ADAPTERS.items():
        assert (REPO / "headrace" / "scorers" / "adapters" / f"{module}.py").is_file()
    with pytest.raises(PermanentError, match="a mxnet model cannot run on the torch runtime"):
        adapters.adapter_for("mxnet", "torch")


def test_string_inputs_are_refused_on_jax_and_torch() -> None:
    m = Manifest(name="m", framework="tensorflow", task="classifier", features=(), label="y",
                 classes=("a", "b"), family="mlp",
                 inputs=(ModelInput(name="colour", kind=InputKind.CATEGORY, shape=()),),
                 outputs=(ModelOutput(name="y", kind=OutputKind.CLASSES, classes=("a", "b")),))
    with pytest.raises(PermanentError, match=r"input .colour. takes strings.*jax runtime"):
        keras_backend.refuse_strings(m, "jax")


def test_a_second_runtime_or_keras_on_another_backend_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import keras  # this process's Keras: TensorFlow's

    monkeypatch.setattr(adapters, "_chosen", [])
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    assert keras.backend.backend() == "tensorflow"
    assert adapters.select_runtime("tensorflow") == "tensorflow"
    assert adapters.runtime() == "tensorflow"
    with pytest.raises(ConfigError, match="scores on the tensorflow runtime"):
        adapters.select_runtime("jax")
    monkeypatch.setattr(adapters, "_chosen", [])
    with pytest.raises(ConfigError, match="Keras was imported with the tensorflow backend"):
        adapters.select_runtime("torch")
    with pytest.raises(ConfigError, match="unknown scorer runtime 'onnx'"):
        adapters.select_runtime("onnx")


def _predict(dfs: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HEADRACE_DFS_ROOT": str(dfs),
           "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", "from headrace.cli import main; main()",
                           "predict", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)


def test_predict_refuses_an_mxnet_model_on_jax_and_an_unknown_runtime_with_one_line(
        dfs: Path, tmp_path: Path) -> None:
    publish_mx(dfs, "mx")
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"a": 1, "b": 2, "c": 3, "d": 4}\n')
    out = _predict(dfs, "mx", str(rows), "--runtime", "jax")
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0, out.stderr
    assert "a mxnet model cannot run on the jax runtime" in out.stderr
    out = _predict(dfs, "mx", str(rows), "--runtime", "onnx")
    assert out.returncode != 0 and out.stderr.strip().count("\n") == 0, out.stderr
    assert "unknown scorer runtime 'onnx'" in out.stderr
