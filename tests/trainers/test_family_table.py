"""The one family table (contracts/families.py) and the frameworks' registries agree; a family
unknown, or without a builder for the request's framework, is refused where the request is
parsed (the control plane dead-letters it), never inside a job."""

from __future__ import annotations

from typing import get_args

import pytest

from headrace.contracts import ModelSpec, TrainRequested, families, parse
from headrace.core.errors import PermanentError
from headrace.core.types import TrainedFramework
from headrace.store.signature import InputKind
from headrace.trainers.backends.family_builders import LOADERS, family_builders


def test_every_framework_of_the_table_has_a_loader_and_every_loader_a_framework() -> None:
    named = {fw for f in families.TABLE.values() for fw in f.frameworks}
    assert named == families.ALL_FRAMEWORKS == {fw.value for fw in LOADERS}
    # Every framework a job trains (imported ONNX models are scored, never trained).
    assert {fw.value for fw in LOADERS} == set(get_args(TrainedFramework))


@pytest.mark.parametrize("framework", ["tensorflow", "mxnet", "torch"])
def test_each_frameworks_registry_holds_exactly_the_tables_families(framework: str) -> None:
    wanted = {f.name for f in families.TABLE.values() if framework in f.frameworks}
    registry = family_builders(framework)
    assert set(registry) == wanted, set(registry) ^ wanted


def test_the_table_names_real_input_kinds_and_spec_fields() -> None:
    kinds = {k.value for k in InputKind}
    fields = set(ModelSpec.model_fields)
    for f in families.TABLE.values():
        assert f.inputs and f.inputs <= kinds, f
        assert set(f.valid_hyperparameters()) <= fields, set(f.valid_hyperparameters()) - fields
    assert tuple(families.TABLE) == families.FAMILIES


def _request(model: str, framework: str) -> dict[str, object]:
    return {"idempotency_key": "k", "model_name": "m", "framework": framework,
            "dataset_uri": "d.parquet", "spec": {"model": model}}


def test_unknown_or_unsupported_families_are_refused_when_the_request_is_parsed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(PermanentError, match="unknown model family 'gpt': use one of mlp"):
        parse(TrainRequested, _request("gpt", "mxnet"))
    only_tf = families.Family("tfonly", frozenset({"numeric"}), (), frozenset({"tensorflow"}))
    monkeypatch.setattr(families, "TABLE", {**families.TABLE, "tfonly": only_tf})
    assert parse(TrainRequested, _request("tfonly", "tensorflow")).spec.model == "tfonly"
    with pytest.raises(PermanentError, match="model family 'tfonly' has no mxnet builder"):
        parse(TrainRequested, _request("tfonly", "mxnet"))
