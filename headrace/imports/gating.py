"""An imported version judged like a trained one: with a labelled sample from the DFS, the same
evaluation (metrics, confusion matrix), the same gate (``trainers.gate``: the chance test, the
thresholds of gates.yaml, no regression against production on the same rows) and a drift
profile from the sample (``trainers.drift_reference``). Without a sample it is not gated: kept,
or promoted by hand (``--promote``), and its gate record says which.

The sample is both the gate's validation rows and its trivial baseline's training rows (the
imported model saw none of it, so there is no split to make): the baseline predicts the
sample's own majority class, or its mean, which is the harder trivial predictor to beat.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from headrace.codecs import codec
from headrace.contracts import ModelSpec
from headrace.contracts.gates import load_gates
from headrace.core.errors import HeadraceError, ValidationFailed
from headrace.core.types import Task
from headrace.drift.fitting import DriftProfile
from headrace.imports.serving import Served, served
from headrace.store import versions
from headrace.store.manifest import Manifest
from headrace.store.signature import InputKind, ModelInput
from headrace.trainers.datasets import Dataset, load_dataset
from headrace.trainers.drift_reference import build_profile
from headrace.trainers.evaluation import Evaluation, baseline, evaluate
from headrace.trainers.gate import GateResult, check
from headrace.trainers.inputs import Inputs, ModelPlan

log = logging.getLogger(__name__)

NOT_GATED = "not gated: imported without --sample (import with --sample DATASET to gate it, " \
            "or promote it by hand)"


@dataclass(frozen=True)
class Sample:
    dataset: Dataset
    inputs: Inputs  # laid out for the imported model's signature
    y: np.ndarray  # class index in the model's class order, or the target


def load_sample(root: Path, uri: str, *, label: str, manifest: Manifest) -> Sample:
    """The labelled dataset, its columns laid out as the model's inputs, its labels in the
    model's class order; one line naming what does not fit."""
    spec = ModelSpec(task=manifest.task, label=label)
    ds = load_dataset(root=root, uri=uri, spec=spec)
    x = layout(ds.x, manifest.input_signature(), uri=uri)
    if manifest.task == Task.CLASSIFIER:
        index = {c: i for i, c in enumerate(manifest.classes)}
        unknown = [c for c in ds.classes if c not in index]
        if unknown:
            raise ValidationFailed(f"sample {uri}: label {unknown[0]!r} is not among the "
                                   f"model's classes ({', '.join(manifest.classes)})")
        y = np.asarray([index[ds.classes[i]] for i in ds.y], np.int64)
    else:
        y = ds.y
    return Sample(ds, x, y)


def layout(x: Inputs, signature: tuple[ModelInput, ...], *, uri: str) -> Inputs:
    """The dataset's rows as the model's inputs: numeric columns picked by name from the
    dataset's numeric inputs, every other input by its name."""
    numeric: dict[str, tuple[str, int]] = {}
    for inp in x.signature:
        if inp.kind == InputKind.NUMERIC:
            numeric.update({c: (inp.name, j) for j, c in enumerate(inp.columns)})
    have = {i.name: i for i in x.signature}
    cols: dict[str, np.ndarray] = {}
    for want in signature:
        if want.kind == InputKind.NUMERIC:
            missing = [c for c in want.columns if c not in numeric]
            if missing:
                raise ValidationFailed(f"sample {uri} has no numeric column {missing[0]!r} "
                                       f"(the model's input {want.name!r} reads it)")
            cols[want.name] = np.stack([x.columns[numeric[c][0]][:, numeric[c][1]]
                                        for c in want.columns], axis=1).astype(np.float32)
            continue
        got = have.get(want.name)
        values = (None if got is None or got.kind != want.kind else
                  codec(want.kind).relayout(got, want, x.columns[want.name]))
        if values is None:
            raise ValidationFailed(f"sample {uri} has no {want.kind} column {want.name!r} "
                                   f"shaped as the model takes it")
        cols[want.name] = values
    return Inputs(cols, signature)


@dataclass(frozen=True)
class Judged:
    evaluation: Evaluation
    gate: GateResult
    outputs: np.ndarray  # the model's scores on the sample
    profile: DriftProfile | None


def judge(root: Path, name: str, manifest: Manifest, model: Served, sample: Sample
          ) -> Judged:
    arrays = sample.inputs.arrays()
    outputs = model(arrays)
    ev = evaluate(task=manifest.task, outputs=outputs, y=sample.y, classes=manifest.classes)
    gate = load_gates(root, name)
    prod_ev, prod_version = _production(root, name, manifest, sample, gate.max_regression)
    base = baseline(task=manifest.task, y_train=sample.y, y_val=sample.y,
                    classes=manifest.classes)
    result = check(gate, ev, prod_ev, prod_version, baseline=base)
    plan = ModelPlan("imported", manifest.input_signature(), manifest.output_signature(),
                     manifest.num_outputs)
    profile = build_profile(spec=ModelSpec(task=manifest.task, label=manifest.label),
                            plan=plan, x_train=sample.inputs, val_outputs=outputs,
                            classes=manifest.classes)
    return Judged(ev, result, outputs, profile)


def _production(root: Path, name: str, manifest: Manifest, sample: Sample,
                max_regression: dict[str, float]) -> tuple[Evaluation | None, int | None]:
    """Production on the same rows, served as the scorer serves it; None when there is none
    or it is not comparable (another task, other classes, inputs the sample lacks)."""
    if not max_regression:
        return None, None
    try:
        prod = versions.resolve(root, f"{name}@{versions.PRODUCTION}")
    except versions.VersionNotFound:
        return None, None
    m = prod.manifest
    if m.task != manifest.task or m.classes != manifest.classes:
        log.warning("production v%d is not comparable (task or classes differ)", prod.version)
        return None, None
    try:
        x = layout(sample.dataset.x, m.input_signature(), uri="")
        outputs = served(prod.path, m)(x.arrays())
    except HeadraceError as exc:
        log.warning("production v%d is not comparable: %s", prod.version, exc)
        return None, None
    return evaluate(task=m.task, outputs=outputs, y=sample.y, classes=m.classes), prod.version


def ungated(promote: bool) -> GateResult:
    return GateResult(passed=True, promote=promote,
                      reasons=[] if promote else [NOT_GATED])


def conversion_check(model: Served, reference: Any, arrays: dict[str, np.ndarray],
                     task: Task) -> dict[str, Any]:
    """The served model against the source's own predictions on the same rows."""
    got = np.asarray(model(arrays), np.float32)
    want = np.asarray(reference(arrays), np.float32).reshape(got.shape)
    diff = float(np.max(np.abs(got - want))) if len(got) else 0.0
    out: dict[str, Any] = {"rows": len(got), "max_abs_diff": diff,
                           "scale": float(np.max(np.abs(want))) if len(got) else 0.0}
    if task == Task.CLASSIFIER:
        out["labels_differ"] = int(np.sum(got.argmax(1) != want.argmax(1)))
    return out
