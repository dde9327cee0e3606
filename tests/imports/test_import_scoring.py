"""Imported versions are served exactly like Headrace's own: for each format, the stream's
prediction of every record equals ``headrace predict`` on it (label and scores), on the
embedded broker; and a scorer swaps from an imported Keras version to an imported ONNX one
(a scikit-learn pipeline converted) without a restart, each record scored by the version that
was production when it came, as ``predict`` of that version scores it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.core.settings import Settings
from headrace.imports import ImportRequest, from_file, import_model
from headrace.imports.declarations import declarations
from headrace.streams.clients import KafkaConnection
from headrace.streams.producing import EventSink
from headrace.streams.topics import MODEL_EVENTS, predictions_topic
from tests.fixtures import eventually, read_topic, ready_scorer, score
from tests.imports import elsewhere
from tests.imports.helpers import build, import_file, predict
from tests.scorers.conftest import send_json

FORMATS = ["sklearn", "lightgbm", "xgboost", "onnx", "torchscript", "torch.export", "keras"]


def _same(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got["label"] == want["label"], (got, want)
    np.testing.assert_allclose(got["scores"], want["scores"], atol=1e-6, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_the_stream_scores_an_imported_model_as_predict_does_on_every_record(
        fmt: str, settings: Settings, conn: KafkaConnection, dfs: Path, stream: str,
        data: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    seed = FORMATS.index(fmt) + 41
    x, y = elsewhere.table(seed)
    path, declared = build(fmt, tmp_path, x[:500], y[:500])
    code, _, err = import_file(capsys, dfs, path, stream, *declared, "--promote")
    assert code == 0, err
    records = elsewhere.records(x[500:])
    rows = elsewhere.write_jsonl(tmp_path / "rows.jsonl", records)
    want = predict(capsys, monkeypatch, dfs, f"{stream}:1", rows)
    keys = send_json(conn, data, records)
    msgs, _ = score(settings, conn, expect=len(records))
    got = {p["key"]: p for p in (json.loads(m.value()) for m in msgs)}
    assert sorted(got) == sorted(keys)
    for key, w in zip(keys, want, strict=True):
        assert got[key]["model_version"] == 1
        _same(got[key], w)


@pytest.mark.slow
def test_a_scorer_swaps_an_imported_keras_version_for_an_imported_onnx_one_without_restart(
        settings: Settings, conn: KafkaConnection, dfs: Path, stream: str, data: str,
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = elsewhere.table(51, rows=800)
    keras_path, declared = build("keras", tmp_path, x[:500], y[:500])
    sk_path = elsewhere.sklearn_pipeline(tmp_path / "gb.joblib", x[:500], y[:500])
    code, _, err = import_file(capsys, dfs, keras_path, stream, *declared, "--promote")
    assert code == 0, err
    first, second = elsewhere.records(x[500:650]), elsewhere.records(x[650:])
    want1 = predict(capsys, monkeypatch, dfs, f"{stream}:1",
                    elsewhere.write_jsonl(tmp_path / "a.jsonl", first))
    monkeypatch.setattr("headrace.scorers.adapters._chosen", [])
    with ready_scorer(settings, conn) as scorer:
        keys1 = send_json(conn, data, first, key_prefix="a")
        read_topic(conn, predictions_topic(stream), expect=len(first), settle_s=0)
        sink = EventSink(conn)
        try:  # as `models import --promote` with a broker: the alias moves, then the event
            result = import_model(root=dfs, request=ImportRequest(
                source=from_file(sk_path), name=stream, declared=declarations([], None),
                promote=True), sink=sink, topic=MODEL_EVENTS)
        finally:
            sink.close()
        assert result.version.version == 2 and result.version.manifest.framework == "onnx"
        eventually(lambda: scorer.holder.current is not None
                   and scorer.holder.current.version == 2, what="swap to the ONNX version")
        keys2 = send_json(conn, data, second, key_prefix="b")
        msgs = read_topic(conn, predictions_topic(stream), expect=len(first) + len(second))
    want2 = predict(capsys, monkeypatch, dfs, f"{stream}:2",
                    elsewhere.write_jsonl(tmp_path / "b.jsonl", second))
    got = {p["key"]: p for p in (json.loads(m.value()) for m in msgs)}
    assert sorted(got) == sorted(keys1 + keys2)
    for keys, want, version in ((keys1, want1, 1), (keys2, want2, 2)):
        for key, w in zip(keys, want, strict=True):
            assert got[key]["model_version"] == version
            _same(got[key], w)
