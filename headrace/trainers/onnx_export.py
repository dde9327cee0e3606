"""``headrace models export NAME:VERSION --format onnx``: a published version as ONNX, checked
by ONNX Runtime on the version's own validation split before it is kept.

The export lives beside the version, ``models/<name>/<version>/exports/onnx/`` (``model.onnx``
and ``export.json``: its sha256, the opset and the check), written to a temporary directory and
renamed, so it is complete or absent. The version's manifest is not rewritten: its sha256 is the
version's identity in the lineage index and the scorers' metrics.

Torch versions only: TensorFlow's ``model.export(format="onnx")`` needs ``tf2onnx`` and torch's
newer exporter ``onnxscript``, neither installed; MXNet's ``mx.onnx`` is not tried.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from headrace.contracts import Framework, ModelSpec, Task
from headrace.core.errors import PermanentError, ValidationFailed
from headrace.store import versions
from headrace.trainers.backends import get_backend
from headrace.trainers.datasets import load_dataset, split
from headrace.trainers.inputs import inputs_for

EXPORTS = "exports"
RECORD = "export.json"
TOLERANCE = 1e-4  # the largest score difference kept (float32 kernels round apart)


def export_onnx(*, root: Path, ref: str) -> dict[str, Any]:
    """Export, check and keep; the record written. ValidationFailed: a version that cannot be
    exported; PermanentError: an export that disagrees with its source (nothing kept)."""
    mv = versions.resolve(root, ref)  # every file's sha256 verified
    m = mv.manifest
    if m.framework != Framework.TORCH:
        raise ValidationFailed(f"{mv.name}:{mv.version} is a {m.framework.value} model: ONNX "
                               f"export is for torch models here (TensorFlow's needs tf2onnx, "
                               f"not installed)")
    if m.dataset is None or "spec" not in m.extra:
        raise ValidationFailed(f"{mv.name}:{mv.version} records no dataset and spec: its "
                               f"validation split cannot be rebuilt to check the export")
    spec = ModelSpec.model_validate(m.extra["spec"])
    ds = load_dataset(root=root, uri=m.dataset.uri, spec=spec)
    x_val = inputs_for(split(ds, validation_split=spec.validation_split, seed=spec.seed).x_val,
                       m.input_signature())
    if x_val is None:
        raise ValidationFailed(f"the dataset {m.dataset.uri} no longer holds the inputs of "
                               f"{mv.name}:{mv.version}")
    onnx = importlib.import_module("headrace.trainers.backends.torch_onnx")
    final = mv.path / EXPORTS / "onnx"
    tmp = Path(tempfile.mkdtemp(prefix=".onnx-", dir=mv.path))
    try:
        onnx.export(mv.path, m.input_signature(), tmp / "model.onnx")
        source = get_backend(m.framework).load_exported(
            mv.path, task=m.task, n_features=len(m.features),
            signature=m.input_signature()).predict(x_val)
        got = onnx.OnnxPredictor(tmp / "model.onnx", mv.path, m.input_signature()).predict(x_val)
        record = _check(source, got, m.task, rows=len(x_val))
        record.update(format="onnx", opset=onnx.OPSET, file="model.onnx",
                      sha256=hashlib.sha256((tmp / "model.onnx").read_bytes()).hexdigest(),
                      source=f"{mv.name}:{mv.version}", created_at=datetime.now(UTC).isoformat())
        (tmp / RECORD).write_text(json.dumps(record, indent=2))
        final.parent.mkdir(exist_ok=True)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return record


def _check(source: np.ndarray, got: np.ndarray, task: Task, *, rows: int) -> dict[str, Any]:
    diff = float(np.max(np.abs(source - got))) if rows else 0.0
    same = (bool(np.array_equal(source.argmax(1), got.argmax(1)))
            if task == Task.CLASSIFIER else True)
    if not same or diff > TOLERANCE:
        raise PermanentError(f"the ONNX export disagrees with its source on the validation "
                             f"split ({rows} rows): labels identical {same}, largest score "
                             f"difference {diff:.3g} (tolerance {TOLERANCE}); nothing kept")
    return {"check": {"rows": rows, "labels_identical": same, "max_abs_diff": diff,
                      "tolerance": TOLERANCE, "runtime": "onnxruntime (CPU)"}}
