"""The onnxruntime scorer runtime: a torch version trained by a real job (a category column, fed
as ids by its shipped vocabulary, and a number) is refused in one line while it has no ONNX
export (``headrace predict``: exit non-zero; a scorer: a fatal error), then exported and scored
from the stream on ONNX Runtime, every record's label identical to ``headrace predict`` on the
torch model and its scores within the export's stated tolerance; ``predict --runtime
onnxruntime`` and ``replay --model --runtime onnxruntime`` give the stream's predictions.

The runtime is chosen once per process (``adapters._chosen``): each phase here resets it, as a
process of its own would start. ONNX Runtime runs on one thread (OMP_NUM_THREADS).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.cli import main
from headrace.core.errors import ConfigError
from headrace.core.settings import Settings
from headrace.scorers import adapters
from headrace.scorers.adapters.onnx_runtime import MissingExport, providers
from headrace.scorers.engine import swapping
from headrace.scorers.engine.metrics import ScorerMetrics
from headrace.scorers.engine.models import LoadedModel, ModelHolder
from headrace.scorers.engine.settings import load_scorer_settings
from headrace.scorers.serving import Scorer
from headrace.store.exports import read_export
from headrace.store.manifest import Manifest
from headrace.store.versions import AliasPointer
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.topics import TopicSpec
from tests.fixtures import read_topic, score
from tests.scorers.conftest import send_json
from tests.scorers.test_scoring_trained_categories import _train


def _predict(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, dfs: Path,
             *args: str) -> tuple[int, list[dict[str, Any]], str]:
    monkeypatch.setattr(adapters, "_chosen", [])  # a process of its own
    capsys.readouterr()  # what came before (a training job's log)
    code = main(["--dfs-root", str(dfs), "predict", *args, "--json"])
    out = capsys.readouterr()
    return code, [json.loads(line) for line in out.out.splitlines()], out.err


def _records(n: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(7)
    colours = rng.choice(["red", "green", "blue", "purple"], n)  # purple: never trained on
    return [{"colour": str(c), "size": float(s)}
            for c, s in zip(colours, rng.normal(1000, 300, n), strict=True)]


@pytest.mark.slow
def test_a_torch_version_scores_from_the_stream_on_onnx_runtime_as_predict_does(
        settings: Settings, conn: KafkaConnection, dfs: Path, stream: str, data: str,
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    mv = _train(dfs, tmp_path, stream, "torch")
    ref = f"{stream}:{mv.version}"
    records = _records(40)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in records))
    code, want, _ = _predict(capsys, monkeypatch, dfs, ref, str(rows))  # the torch model
    assert code == 0 and len(want) == len(records)

    # No export yet: one line naming the command, from predict and from a scorer.
    command = f"headrace models export {ref} --format onnx"
    code, _, err = _predict(capsys, monkeypatch, dfs, ref, str(rows), "--runtime", "onnxruntime")
    assert code != 0 and err.strip().count("\n") == 0 and command in err, err
    monkeypatch.setattr(adapters, "_chosen", [])
    scorer = Scorer(settings, load_scorer_settings(
        stream=stream, runtime="onnxruntime", device="cpu", http_port=0,
        http_host="127.0.0.1", partitions="0,1,2"), conn=conn)
    raised: list[BaseException] = []
    stop = threading.Event()

    def run() -> None:
        try:
            scorer.run(stop)
        except BaseException as exc:  # asserted below
            raised.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(60)
    stop.set()
    assert not t.is_alive() and len(raised) == 1 and isinstance(raised[0], MissingExport)
    assert command in str(raised[0]) and raised[0].exit_code == 2

    assert main(["--dfs-root", str(dfs), "models", "export", ref, "--format", "onnx"]) == 0
    capsys.readouterr()
    export = read_export(mv.path, "onnx")
    assert export is not None and export.record["feed"] == "float32"
    tolerance = export.record["check"]["tolerance"]

    keys = send_json(conn, data, records)
    monkeypatch.setattr(adapters, "_chosen", [])
    msgs, _ = score(settings, conn, expect=len(records), runtime="onnxruntime")
    got = {p["key"]: p for p in (json.loads(m.value()) for m in msgs)}
    assert adapters.runtime() == "onnxruntime"
    assert sorted(got) == sorted(keys)
    for key, w in zip(keys, want, strict=True):
        assert got[key]["label"] == w["label"], (key, got[key], w)
        np.testing.assert_allclose(got[key]["scores"], w["scores"], atol=tolerance, rtol=0)
    code, offline, _ = _predict(capsys, monkeypatch, dfs, ref, str(rows), "--runtime",
                                "onnxruntime")
    assert code == 0
    for key, o in zip(keys, offline, strict=True):
        assert o["label"] == got[key]["label"]
        np.testing.assert_allclose(o["scores"], got[key]["scores"], atol=1e-6, rtol=0)

    # replay --model --runtime onnxruntime re-scores the range as the stream scored it.
    side = f"{stream}.onnx-side"
    ensure_topics(conn, [TopicSpec(side, 3, "a re-score's side topic")])
    monkeypatch.setattr(adapters, "_chosen", [])
    assert main(["--bootstrap", conn.bootstrap, "--dfs-root", str(dfs), "replay", data,
                 "--into", side, "--model", ref, "--runtime", "onnxruntime",
                 "--no-progress"]) == 0
    assert adapters.runtime() == "onnxruntime"
    again = {p["key"]: p for p in (json.loads(m.value()) for m in
                                   read_topic(conn, side, expect=len(records)))}
    assert sorted(again) == sorted(keys)
    for key in keys:
        assert again[key]["label"] == got[key]["label"]
        np.testing.assert_allclose(again[key]["scores"], got[key]["scores"], atol=1e-6, rtol=0)


def test_the_device_picks_the_provider_or_is_refused_in_one_line() -> None:
    cpu_only = ["CPUExecutionProvider"]
    both = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert providers("cpu", both) == ["CPUExecutionProvider"]
    assert providers("auto", cpu_only) == ["CPUExecutionProvider"]
    assert providers("auto", both)[0] == ("CUDAExecutionProvider", {"device_id": 0})
    assert providers("gpu:1", both)[0] == ("CUDAExecutionProvider", {"device_id": 1})
    with pytest.raises(ConfigError, match="gpu:0 requested but this onnxruntime has no "
                                          "CUDAExecutionProvider") as e:
        providers("gpu:0", cpu_only)
    assert "\n" not in str(e.value)


def _watcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> swapping.ModelWatcher:
    monkeypatch.setattr(swapping, "read_alias", lambda root, name, alias: AliasPointer(
        version=2, manifest_sha256="v2", previous=1, updated_at=""))

    def no_export(**kwargs: Any) -> LoadedModel:
        raise MissingExport("m:2 has no ONNX export, which the onnxruntime runtime scores: "
                            "run `headrace models export m:2 --format onnx` first")

    monkeypatch.setattr(swapping, "load_model", no_export)
    return swapping.ModelWatcher(root=tmp_path, name="m", alias="production", device="cpu",
                                 max_batch=8, holder=ModelHolder(), events=None, poll_s=60,
                                 metrics=ScorerMetrics(stream="s", model="m"))


def test_a_version_the_runtime_cannot_take_is_fatal_first_and_refused_at_a_swap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing serves: the error ends the process (its exit code, its one line).
    with pytest.raises(MissingExport, match="headrace models export m:2"):
        _watcher(tmp_path, monkeypatch).wait_first(threading.Event())
    # Serving version 1: version 2 is refused and counted; 1 keeps serving, the watcher lives.
    w = _watcher(tmp_path, monkeypatch)
    m = Manifest(name="m", version=1, framework="torch", task="classifier", features=("a",),
                 label="y", classes=("no", "yes"))
    w.holder.swap(LoadedModel(name="m", version=1, manifest=m, manifest_sha256="v1",
                              fn=lambda x: x, features=("a",), classes=("no", "yes")))
    assert w.check() is None and w.check() is None  # refused once, not retried
    assert w.holder.current is not None and w.holder.current.version == 1
    failures = w.metrics.registry.get_sample_value(
        "headrace_scorer_model_load_failures_total",
        {"model": "m", "reason": "load"})
    assert failures == 1
