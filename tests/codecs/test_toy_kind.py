"""Adding an input kind is one module and one registration: this module defines a toy kind,
``point`` ("x,y" strings, fed as float32 (2,)), registers it, and runs it from ``datasets put``
through a real training job (TensorFlow and MXNet, in process) to predictions on the broker and
offline, touching no other module of the package."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import headrace.models
from headrace import codecs
from headrace.cli import streams_cmd
from headrace.codecs import json_values
from headrace.codecs.arrow_types import ColumnError, is_string
from headrace.codecs.columns import Limits, Reasons, present
from headrace.codecs.registry import (
    Codec,
    as_is,
    float_input,
    floats,
    never,
    no_constants,
    nothing_learned,
    row_shape,
    same_shape,
)
from headrace.contracts import ModelSpec, TrainRequested
from headrace.core.settings import Settings
from headrace.store import versions
from headrace.store.signature import KindName, ModelInput
from headrace.streams.clients import KafkaConnection
from headrace.trainers import jobs
from headrace.trainers.dataset_files import DatasetFileError, put_dataset
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.job_process import run_job
from tests.scorers.conftest import score
from tests.scorers.test_scoring_signatures import dead_reasons, json_item, produce, split

# ---- the toy kind: this is all a new kind takes ----


def _parse(values: list[object]) -> tuple[np.ndarray, list[int]]:
    out = np.zeros((len(values), 2), np.float32)
    bad = []
    for i, v in enumerate(values):
        try:
            x, y = str(v).split(",")
            out[i] = (float(x), float(y))
        except ValueError:
            bad.append(i)
    return out, bad


def _dataset_input(names: tuple[str, ...], table: pa.Table, spec: ModelSpec
                   ) -> tuple[ModelInput, np.ndarray]:
    (name,) = names
    values, bad = _parse(table.column(name).to_pylist())
    if bad:
        raise ColumnError(f"row {bad[0]} is not an x,y point")
    return ModelInput(name=name, kind="point", shape=(2,)), values


def _arrow(inp: ModelInput, arr: pa.Array, limits: Limits,
           conversions: Counter[str] | None) -> tuple[np.ndarray, Reasons]:
    values, bad = _parse(arr.to_pylist())
    return values, {i: f"input {inp.name!r}: not an x,y point" for i in bad}


def _check(inp: ModelInput) -> None:
    if inp.shape != (2,):
        raise ValueError(f"point input {inp.name!r} has shape (2,)")


POINT = Codec(
    "point",
    infer=None,  # only forced: datasets put --kind where=point
    accepts=lambda col: is_string(col.type), nulls=False, dataset_input=_dataset_input,
    check=_check, train_decode=as_is, learn=nothing_learned, relayout=same_shape,
    family_kind="tensor", spatial=never,  # an mlp takes it as it takes a flat tensor
    keras_input=float_input, keras_preprocess=lambda keras, inp, x, st: x,
    vocabulary=False, mxnet_export=lambda inp: inp, mxnet_feed=floats,
    mxnet_feed_shape=row_shape, mxnet_constants=no_constants,
    mxnet_forward=lambda F, inp, x, consts, st: x, torch_forward=lambda t, inp, x, c, st: x,
    build=present(_arrow, lambda inp, n: np.zeros((n, 2), np.float32)),
    from_json=json_values.texts, json_type=lambda inp: pa.string(), send_as="string",
    summary=lambda v: f"<point {v}>")


@pytest.fixture
def point_kind() -> Iterator[Codec]:
    codecs.register(POINT)  # the one registration
    try:
        yield POINT
    finally:
        del codecs.REGISTRY["point"]  # the session's other tests see the built-in kinds only


# ---- the run: dataset -> train -> score ----


def _points(rng: np.random.Generator, n: int) -> tuple[list[str], np.ndarray]:
    xy = rng.uniform(-1, 1, (n, 2))
    return [f"{x:.4f},{y:.4f}" for x, y in xy], (xy[:, 0] > xy[:, 1]).astype(np.int64)


def _train(dfs: Path, tmp_path: Path, name: str, framework: str) -> versions.ModelVersion:
    where, label = _points(np.random.default_rng(0), 300)
    path = tmp_path / "points.jsonl"
    path.write_text("".join(json.dumps({"where": w, "label": int(y)}) + "\n"
                            for w, y in zip(where, label, strict=True)))
    info = put_dataset(root=dfs, path=path, kinds={"where": codecs.kind("point")})
    stored = pq.read_schema(dfs / "datasets" / "points.parquet").metadata
    assert json.loads(stored[b"headrace.kinds"])["where"] == "point"
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name=name, framework=framework,
                         dataset_uri=info.uri,
                         spec=ModelSpec(epochs=30, batch_size=32, hidden=(16,),
                                        learning_rate=0.03))
    jid, _ = jobs.create_request(dfs, req)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.version is not None and st.promoted, st
    return versions.load_version(dfs, name, st.version)


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["tensorflow", "mxnet"])
def test_a_toy_kind_registered_in_its_own_module_trains_and_scores(
        framework: str, point_kind: Codec, settings: Settings, conn: KafkaConnection, dfs: Path,
        stream: str, data: str, tmp_path: Path) -> None:
    mv = _train(dfs, tmp_path, stream, framework)
    [inp] = mv.manifest.input_signature()
    assert (inp.name, inp.kind, inp.shape) == ("where", "point", (2,))

    where, label = _points(np.random.default_rng(1), 60)
    produce(conn, data, [json_item(f"p{i}", {"where": w}) for i, w in enumerate(where)]
            + [json_item("nowhere", {"where": "north"})])
    msgs, dead = score(settings, conn, expect=len(where), dead=1)
    js, _ = split(msgs)
    classes = mv.manifest.classes
    streamed = np.array([classes.index(js[f"p{i}"]["label"]) for i in range(len(where))])
    assert float(np.mean(streamed == label)) >= 0.9  # it learned x > y through the toy kind
    assert dead_reasons(dead) == {"nowhere": "input 'where': not an x,y point"}

    # tail shows the stream's fields by their kind: the toy's own summary.
    by_field = streams_cmd._field_summaries(dfs, data)
    assert streams_cmd.shown({"where": "1,2", "x": 3}, by_field) == {"where": "<point 1,2>",
                                                                     "x": 3}
    assert streams_cmd._field_summaries(dfs, f"data.{stream}.dlq") == {}

    # Offline predictions go through the same decode and core: the same scores.
    offline = headrace.models.load(f"{mv.name}:{mv.version}", dfs_root=dfs).predict(
        [{"where": w} for w in where])
    for i, out in enumerate(offline):
        assert isinstance(out, dict)
        np.testing.assert_allclose(out["scores"], js[f"p{i}"]["scores"], rtol=1e-5, atol=1e-6)


def test_without_its_registration_the_toy_kind_is_refused_everywhere(
        dfs: Path, tmp_path: Path) -> None:
    path = tmp_path / "points.jsonl"
    path.write_text("".join(json.dumps({"where": "1,2", "label": i % 2}) + "\n"
                            for i in range(12)))
    with pytest.raises(DatasetFileError, match="no codec for input kind 'point'"):
        put_dataset(root=dfs, path=path, kinds={"where": KindName("point")})
    with pytest.raises(codecs.UnknownKind):
        codecs.kind("point")
