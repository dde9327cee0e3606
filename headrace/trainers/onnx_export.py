"""``headrace models export NAME:VERSION --format onnx``: a published version as ONNX, checked
by ONNX Runtime on the version's own validation split before it is kept.

The export lives beside the version (``store.exports``: ``exports/onnx/model.onnx`` and
``export.json``: its sha256, the opset, how the graph is fed and the check), written to a
temporary directory and renamed, so it is complete or absent. The version's manifest is not
rewritten: its sha256 is the version's identity in the lineage index and the scorers' metrics.

Torch versions (``backends.torch_onnx``) and Keras versions (``backends.keras_onnx``, with
tf2onnx) export; MXNet's ``mx.onnx`` is not tried. The check feeds ONNX Runtime through the
same ``codecs.feeds`` the scorer's onnxruntime runtime uses.
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

from headrace.codecs.feeds import FEEDS, onnx_cast
from headrace.contracts import Framework, ModelSpec, Task
from headrace.core.errors import PermanentError, ValidationFailed
from headrace.store import versions
from headrace.store.exports import RECORD, export_dir
from headrace.store.signature import ModelInput
from headrace.trainers.backends import get_backend
from headrace.trainers.backends.base import PREDICT_BATCH
from headrace.trainers.datasets import load_dataset, split
from headrace.trainers.inputs import Inputs, as_inputs, inputs_for

FORMAT = "onnx"
TOLERANCE = 1e-4  # the largest score difference kept (float32 kernels round apart)
EXPORTERS = {  # framework -> its exporter module (export(), OPSET, FEED)
    Framework.TORCH: "headrace.trainers.backends.torch_onnx",
    Framework.TENSORFLOW: "headrace.trainers.backends.keras_onnx",
}


def export_onnx(*, root: Path, ref: str) -> dict[str, Any]:
    """Export, check and keep; the record written. ValidationFailed: a version that cannot be
    exported; PermanentError: an export that disagrees with its source (nothing kept)."""
    mv = versions.resolve(root, ref)  # every file's sha256 verified
    m = mv.manifest
    if m.framework not in EXPORTERS:
        raise ValidationFailed(f"{mv.name}:{mv.version} is a {m.framework.value} model: ONNX "
                               f"export is for {' and '.join(f.value for f in EXPORTERS)} "
                               f"models here")
    if len(m.output_signature()) != 1:
        raise ValidationFailed(f"{mv.name}:{mv.version} has {len(m.output_signature())} "
                               f"outputs: the export's check compares one")
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
    exporter = importlib.import_module(EXPORTERS[m.framework])
    final = export_dir(mv.path, FORMAT)
    tmp = Path(tempfile.mkdtemp(prefix=".onnx-", dir=mv.path))
    try:
        names = exporter.export(mv.path, m, tmp / "model.onnx")
        source = get_backend(m.framework).load_exported(
            mv.path, task=m.task, n_features=len(m.features),
            signature=m.input_signature()).predict(x_val)
        got = OnnxPredictor(tmp / "model.onnx", mv.path, m.input_signature(),
                            feed=exporter.FEED, names=names).predict(x_val)
        record = _check(source, got, m.task, rows=len(x_val))
        record.update(format=FORMAT, opset=exporter.OPSET, file="model.onnx",
                      sha256=hashlib.sha256((tmp / "model.onnx").read_bytes()).hexdigest(),
                      feed=exporter.FEED, inputs=names, framework=m.framework.value,
                      source=f"{mv.name}:{mv.version}", created_at=datetime.now(UTC).isoformat())
        (tmp / RECORD).write_text(json.dumps(record, indent=2))
        final.parent.mkdir(exist_ok=True)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return record


class OnnxPredictor:
    """``model.onnx`` on ONNX Runtime (CPU), fed by ``codecs.feeds`` as its record says."""

    def __init__(self, path: Path, version_path: Path, signature: tuple[ModelInput, ...], *,
                 feed: str, names: list[str]) -> None:
        import onnxruntime

        self.session = onnxruntime.InferenceSession(str(path),
                                                    providers=["CPUExecutionProvider"])
        self.types = {i.name: str(i.type) for i in self.session.get_inputs()}
        self.feeders = [(inp.name, g, FEEDS[feed](inp, version_path))
                        for inp, g in zip(signature, names, strict=True)]

    def predict(self, x: Inputs | np.ndarray) -> np.ndarray:
        inp = as_inputs(x)
        outs = []
        for i in range(0, len(inp), PREDICT_BATCH):
            arrays = inp[i:i + PREDICT_BATCH].arrays()
            feed = {g: onnx_cast(f(arrays[k]), self.types[g]) for k, g, f in self.feeders}
            outs.append(np.asarray(self.session.run(None, feed)[0], np.float32))
        return np.concatenate(outs) if outs else np.zeros((0, 1), np.float32)


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
