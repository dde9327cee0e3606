"""What the job process checks and loads besides training (called from ``running``):
the request's caps again, the dataset's size before it is read, the user's model code
(verified and imported here, never in the control plane), the built model's parameters,
and what the manifest records about the code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from headrace.contracts import CodeRef, TrainRequested
from headrace.trainers import code_loading, limits
from headrace.trainers.backends.base import Model
from headrace.trainers.datasets import Dataset, Split


def before_dataset(root: Path, req: TrainRequested, caps: limits.RequestCaps) -> None:
    limits.check_request(req, caps)
    limits.check_dataset_size(root, req.dataset_uri, caps)


def load_code(root: Path, req: TrainRequested, ds: Dataset) -> None:
    """Verify and import the request's code package (if it names one) for the backend."""
    if isinstance(req.spec.model, CodeRef):
        # The dataset's raw inputs (a tabular one: one numeric input ``features``).
        raw = tuple(i.model_copy(update={"preprocessing": ()}) for i in ds.x.signature)
        code_loading.load(root=root, ref=req.spec.model, inputs=raw,
                          hyperparameters=req.hyperparameters)


def after_build(model: Model, sp: Split, caps: limits.RequestCaps) -> None:
    limits.check_parameters(model.parameter_count(), caps)
    prepare = getattr(model, "prepare", None)
    if prepare is not None:  # preprocessing learned on the training rows (user code)
        prepare(sp.x_train)


def manifest_extra(req: TrainRequested) -> dict[str, Any]:
    if not isinstance(req.spec.model, CodeRef):
        return {}
    return {"code": code_loading.resolve_builder(req.spec).manifest_fields()}


def manifest_fields(req: TrainRequested) -> dict[str, Any]:
    if not isinstance(req.spec.model, CodeRef):
        return {}
    return {"code_version": code_loading.resolve_builder(req.spec).version.ref}
