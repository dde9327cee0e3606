"""Each format imports as an ordinary version: a manifest whose every file's sha256 checks, the
source file's sha256 as its lineage, the signature mapped to codecs by name, classes from the
model (or --labels); without a sample it is kept, not promoted, and the listing says why; and
``headrace predict`` gives the source model's own answers on every row of held-out data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.store import outcomes, versions
from headrace.store.dfs import sha256_file
from tests.imports import elsewhere
from tests.imports.helpers import build, cli, import_file, predict

FORMATS = ["sklearn", "lightgbm", "xgboost", "onnx", "torchscript", "torch.export", "keras"]
SLOW = {"torchscript", "keras"}  # over 20 s here, most of it importing torch or TensorFlow


@pytest.mark.parametrize("fmt", [pytest.param(f, marks=pytest.mark.slow) if f in SLOW else f
                                 for f in FORMATS])
def test_a_model_file_imports_as_a_version_that_predicts_as_its_source_does(
        fmt: str, dfs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    seed = FORMATS.index(fmt) + 11
    x, y = elsewhere.table(seed)
    path, declared = build(fmt, tmp_path, x[:500], y[:500])
    name = "m" + fmt.replace(".", "")
    code, _, err = import_file(capsys, dfs, path, name, *declared)
    assert code == 0, err
    mv = versions.load_version(dfs, name, 1)  # every file's sha256 checked
    m = mv.manifest
    assert m.extra["import"]["source"]["sha256"] == sha256_file(path.resolve())
    assert m.extra["import"]["format"] == fmt
    assert m.task == "classifier" and m.classes == ("0", "1", "2")
    assert set(m.features) == set(elsewhere.FEATURES)
    assert versions.read_alias(dfs, name) is None  # not promoted without a sample
    said = outcomes.of_version(dfs, name, 1)
    assert said is not None and said.line().startswith("kept: not gated")
    code, listing, _ = cli(capsys, "--dfs-root", str(dfs), "models", "list")
    assert code == 0 and "kept: not gated" in listing
    code, shown, _ = cli(capsys, "--dfs-root", str(dfs), "models", "show", f"{name}:1")
    assert code == 0 and f"({fmt}, sha256 {sha256_file(path.resolve())[:12]})" in shown

    held_out = x[500:]
    rows = elsewhere.write_jsonl(tmp_path / "rows.jsonl", elsewhere.records(held_out))
    got = predict(capsys, monkeypatch, dfs, f"{name}:1", rows)
    assert len(got) == len(held_out)
    scores = np.asarray([g["scores"] for g in got], np.float32)
    own = _own_scores(fmt, path, held_out)
    assert [g["label"] for g in got] == [str(i) for i in own.argmax(1)]
    np.testing.assert_allclose(scores, own, atol=1e-4, rtol=0)


def _own_scores(fmt: str, path: Path, x: np.ndarray) -> np.ndarray:
    """The source library's own predictions, loaded from the file as its users load it."""
    if fmt == "sklearn":
        import joblib

        return np.asarray(joblib.load(path).predict_proba(elsewhere.frame(x)), np.float32)
    if fmt == "lightgbm":
        import lightgbm

        return np.asarray(lightgbm.Booster(model_file=str(path)).predict(x), np.float32)
    if fmt == "xgboost":
        import xgboost

        return np.asarray(xgboost.Booster(model_file=str(path)).inplace_predict(x), np.float32)
    if fmt == "onnx":
        import onnxruntime

        sess = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        zipped = sess.run(None, {"X": x})[1]
        return np.asarray([[row[k] for k in sorted(row)] for row in zipped], np.float32)
    if fmt in ("torchscript", "torch.export"):
        import torch

        module = (torch.jit.load(str(path)) if fmt == "torchscript"
                  else torch.export.load(str(path)).module())
        with torch.inference_mode():
            return np.asarray(module(torch.from_numpy(x)).numpy(), np.float32)
    import keras

    return np.asarray(keras.saving.load_model(path)(x), np.float32)
