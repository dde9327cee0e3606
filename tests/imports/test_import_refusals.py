"""What cannot be imported is refused in one line on stderr, naming what: an estimator skl2onnx
cannot convert, an input or output no codec maps, an undeclared TorchScript input, a file of no
known format, --labels that do not fit; nothing is published."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from headrace.store import versions
from tests.imports import elsewhere
from tests.imports.helpers import import_file


def _refused(capsys: pytest.CaptureFixture[str], dfs: Path, path: Path, name: str,
             *extra: str) -> str:
    code, _, err = import_file(capsys, dfs, path, name, *extra)
    assert code == 1, err
    assert err.strip().count("\n") == 0 and "Traceback" not in err, err
    assert versions.list_versions(dfs, name) == []
    return err


def test_hist_gradient_boosting_is_refused_naming_it(
        dfs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x, y = elsewhere.table(31)
    path = elsewhere.sklearn_pipeline(tmp_path / "hgb.joblib", x, y, estimator="hgb")
    err = _refused(capsys, dfs, path, "hgb")
    assert "HistGradientBoostingClassifier does not convert to ONNX with skl2onnx" in err


def _graph(path: Path, *, inputs: list[onnx.ValueInfoProto], node: onnx.NodeProto,
           outputs: list[onnx.ValueInfoProto]) -> Path:
    model = helper.make_model(helper.make_graph([node], "g", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return path


def test_an_input_of_any_width_is_refused_naming_it(
        dfs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _graph(tmp_path / "any.onnx",
                  inputs=[helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", "k"])],
                  node=helper.make_node("Identity", ["X"], ["Y"]),
                  outputs=[helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", "k"])])
    err = _refused(capsys, dfs, path, "anywidth")
    assert "input 'X'" in err and "--input X:KIND" in err


def test_outputs_without_scores_are_refused_naming_them(
        dfs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _graph(tmp_path / "strings.onnx",
                  inputs=[helper.make_tensor_value_info("s", TensorProto.STRING, ["N", 1])],
                  node=helper.make_node("Identity", ["s"], ["t"]),
                  outputs=[helper.make_tensor_value_info("t", TensorProto.STRING, ["N", 1])])
    err = _refused(capsys, dfs, path, "strings")
    assert "t: string" in err and "hold no scores" in err


def test_an_undeclared_torchscript_input_is_refused_naming_it(
        dfs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x, y = elsewhere.table(32)
    path = elsewhere.torchscript_module(tmp_path / "m.pt", x, y)
    err = _refused(capsys, dfs, path, "ts")
    assert "input 'input' of the TorchScript module: declare it" in err


def test_a_file_of_no_known_format_and_labels_that_do_not_fit_are_refused(
        dfs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a model\n")
    assert "not a model file Headrace imports" in _refused(capsys, dfs, notes, "notes")
    x, y = elsewhere.table(33)
    path = elsewhere.lightgbm_booster(tmp_path / "lgb.txt", x, y)
    err = _refused(capsys, dfs, path, "lgb", "--labels", "a,b")
    assert "--labels names 2 classes; the booster has 3" in err
