from __future__ import annotations

import json

import pytest

from headrace.contracts import (
    Framework,
    JobEvent,
    JobEventKind,
    ModelPublished,
    Prediction,
    TrainRequested,
    parse,
)
from headrace.core.errors import ValidationFailed


def _request(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {"idempotency_key": "k1", "model_name": "iris",
                               "framework": "tensorflow", "dataset_uri": "datasets/demo.parquet"}
    base.update(kw)
    return base


@pytest.mark.parametrize("contract, data", [
    (TrainRequested, _request(spec={"task": "regressor", "hidden": [8], "epochs": 2},
                              trigger={"kind": "schedule", "source": "nightly", "slot": "2026"})),
    (JobEvent, {"job_id": "j-1", "kind": "progress", "epoch": 1, "metrics": {"loss": 0.5}}),
    (ModelPublished, {"model_name": "iris", "version": 3, "framework": "mxnet",
                      "task": "classifier", "path": "models/iris/3", "manifest_sha256": "a" * 64}),
    (Prediction, {"source_topic": "data.x", "source_partition": 0, "source_offset": 7,
                  "model_name": "iris", "model_version": 1, "scores": [0.1, 0.9]}),
])
def test_contracts_round_trip_through_bytes(contract: type, data: dict[str, object]) -> None:
    obj = parse(contract, data)
    again = parse(contract, obj.to_bytes())
    assert again == obj
    assert json.loads(obj.to_bytes())["schema_version"] == 1


@pytest.mark.parametrize("data, fragment", [
    (_request(framework="caffe"), "framework"),
    (_request(model_name="../../etc"), "model_name"),
    (_request(model_name="a;rm -rf /"), "model_name"),
    (_request(dataset_uri="../../etc/passwd"), "dataset_uri"),
    (_request(dataset_uri="/etc/passwd"), "dataset_uri"),
    (_request(dataset_uri="ftp://x/y"), "dataset_uri"),
    (_request(unknown_field=1), "unknown_field"),
    (_request(spec={"epochs": 0}), "spec.epochs"),
    ({"model_name": "x"}, "idempotency_key"),
])
def test_train_request_rejects_bad_payloads_with_one_clear_line(
    data: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ValidationFailed) as info:
        parse(TrainRequested, json.dumps(data).encode())
    msg = str(info.value)
    assert fragment in msg and "\n" not in msg


def test_undecodable_and_oversized_events_are_rejected() -> None:
    with pytest.raises(ValidationFailed, match="Invalid JSON"):
        parse(TrainRequested, b"{not json")
    with pytest.raises(ValidationFailed, match="exceeds the limit"):
        parse(TrainRequested, b"x" * 2_000_000)


def test_newer_schema_version_is_refused() -> None:
    with pytest.raises(ValidationFailed, match="newer"):
        parse(JobEvent, {"job_id": "j", "kind": "log", "schema_version": 2})


def test_enums_are_plain_strings_on_the_wire() -> None:
    ev = JobEvent(job_id="j-1", kind=JobEventKind.FAILED, reason="dataset missing")
    assert json.loads(ev.to_bytes())["kind"] == "failed"
    assert Framework("mxnet") is Framework.MXNET
