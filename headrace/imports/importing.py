"""``import_model``: a source (file, or what the MLflow resolver fetched) to a published,
gated version, in numbered steps:

1. The format's importer converts the source into served files and a signature (``formats``).
2. The files are loaded through the scorer's adapter, as a scorer will load them (``serving``);
   a converted model is checked against its source on the sample (or on random rows).
3. With a sample: evaluated and gated like a trained version, its drift profile fitted
   (``gating``); without: not gated.
4. Published with the store's protocol (``versions.publish``: files, sha256 of each, manifest
   last), its lineage in ``extra.import``.
5. Promoted when the gate passed and promotes (``--promote`` without a sample): the production
   alias moves and ModelPublished goes to events.models when a broker is given.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headrace.core.naming import check_name
from headrace.drift.fitting import PROFILE_FILE
from headrace.imports import gating
from headrace.imports.converted import Converted
from headrace.imports.declarations import Declarations
from headrace.imports.formats import importer_for
from headrace.imports.serving import served, synthetic
from headrace.imports.signature import features_of
from headrace.imports.sources import ImportSource
from headrace.store import versions
from headrace.store.manifest import Manifest
from headrace.store.outcomes import Outcome, Result
from headrace.streams.producing import EventSink
from headrace.trainers.evaluation import render_confusion_png
from headrace.trainers.gate import GateResult
from headrace.trainers.inputs import format_needed
from headrace.trainers.promotion import promote as announce

log = logging.getLogger(__name__)

CHECK_ROWS = 256  # random rows for the conversion check without a sample
# A converted classifier must give its source's label on every row; a regressor's values may
# differ by float32 rounding (relative to the values' size).
REGRESSION_TOLERANCE = 1e-3


@dataclass(frozen=True)
class ImportRequest:
    source: ImportSource
    name: str
    declared: Declarations = field(default_factory=Declarations)
    sample: str | None = None  # a labelled dataset on the DFS
    label: str = "label"  # the sample's label column
    promote: bool = False  # without a sample: promote anyway


@dataclass(frozen=True)
class ImportResult:
    version: versions.ModelVersion
    gate: GateResult
    outcome: Outcome
    format: str

    def line(self) -> str:
        return f"{self.version.name}:{self.version.version} ({self.format}) {self.outcome.line()}"


def import_model(*, root: Path, request: ImportRequest, sink: EventSink | None = None,
                 topic: str = "events.models") -> ImportResult:
    name = check_name(request.name, what="model name")
    found = importer_for(request.source)
    log.info("importing %s as %s (%s)", request.source.uri, name, found.NAME)
    with tempfile.TemporaryDirectory(prefix="headrace-import-") as tmp:
        conv = found.convert(request.source, Path(tmp) / "model", request.declared)
        manifest = _manifest(name, conv, request, found.NAME)
        model = served(conv.directory, manifest)
        sample = (gating.load_sample(root, request.sample, label=request.label,
                                     manifest=manifest) if request.sample else None)
        check = _conversion(conv, model, manifest, sample)
        judged = (gating.judge(root, name, manifest, model, sample)
                  if sample is not None else None)
        gate = judged.gate if judged is not None else gating.ungated(request.promote)
        gate = _with_conversion(gate, check, manifest)
        extra = {**manifest.extra, "gate": gate.model_dump(),
                 "import": {**manifest.extra["import"], "check": check}}
        if judged is not None and sample is not None:
            ev = judged.evaluation
            manifest = manifest.model_copy(update={
                "metrics": ev.metrics, "confusion_matrix": ev.confusion_matrix,
                "dataset": sample.dataset.identity, "label": sample.dataset.label,
                "extra": extra})
        else:
            manifest = manifest.model_copy(update={"extra": extra})

        def write_files(d: Path) -> None:
            shutil.copytree(conv.directory, d, dirs_exist_ok=True)
            if judged is not None:
                (d / "metrics.json").write_bytes(judged.evaluation.to_json())
                if judged.profile is not None:
                    (d / PROFILE_FILE).write_text(judged.profile.model_dump_json())
                if judged.evaluation.classes:
                    render_confusion_png(judged.evaluation, d / "confusion_matrix.png",
                                         title=f"{name} (imported, {request.sample})")

        mv = versions.publish(root, manifest, write_files)
    outcome = _settle(root, mv, gate, request, sink=sink, topic=topic)
    result = ImportResult(mv, gate, outcome, found.NAME)
    log.info("%s", result.line())
    return result


def _manifest(name: str, conv: Converted, request: ImportRequest, fmt: str) -> Manifest:
    return Manifest(
        format_version=format_needed(conv.inputs), name=name, framework=conv.framework,
        task=conv.task, features=features_of(conv.inputs), label=request.label,
        classes=conv.classes, inputs=conv.inputs, outputs=conv.outputs, family="imported",
        model_format=conv.model_format,
        extra={**conv.extra, "import": {"format": fmt, "source": {
            "uri": request.source.uri, **request.source.lineage}, "conversion": conv.record}})


def _conversion(conv: Converted, model: Any, manifest: Manifest,
                sample: gating.Sample | None) -> dict[str, Any]:
    """The served model against its source (when converted), on the sample or random rows."""
    if conv.reference is None:
        return {"converted": False}
    arrays = sample.inputs.arrays() if sample is not None else synthetic(manifest, CHECK_ROWS)
    if arrays is None:
        return {"converted": True, "checked": False,
                "why": "no sample, and the inputs are not numbers to make up"}
    return {"converted": True, "checked": True, "on": "sample" if sample else "random rows",
            **gating.conversion_check(model, conv.reference, arrays, manifest.task)}


def _with_conversion(gate: GateResult, check: dict[str, Any], manifest: Manifest
                     ) -> GateResult:
    """A conversion that changed the model's answers holds it back (rule ``conversion``)."""
    if not check.get("checked"):
        return gate
    differ = int(check.get("labels_differ", 0))
    diff = float(check["max_abs_diff"])
    why = None
    if differ:
        why = (f"the converted model's label differs from its source's on {differ} of "
               f"{check['rows']} rows")
    elif manifest.task != "classifier" and diff > REGRESSION_TOLERANCE * (
            1 + float(check.get("scale", 0))):
        why = f"the converted model's values differ from its source's by up to {diff:.3g}"
    if why is None:
        return gate
    return gate.model_copy(update={"passed": False, "reasons": [*gate.reasons, why],
                                   "held_by": [*gate.held_by, "conversion"]})


def _settle(root: Path, mv: versions.ModelVersion, gate: GateResult, request: ImportRequest,
            *, sink: EventSink | None, topic: str) -> Outcome:
    if not gate.passed:
        return Outcome(Result.REFUSED, "; ".join(gate.reasons), tuple(gate.held_by))
    if not gate.promote:
        return Outcome(Result.KEPT, "; ".join(gate.reasons) or "promotion off")
    reason = ("manual: imported with --promote, not gated" if request.sample is None
              else f"import of {request.source.uri} (gate passed on {request.sample})")
    if sink is not None:
        announce(root=root, sink=sink, topic=topic, name=mv.name, version=mv.version,
                 reason=reason)
    else:
        versions.set_alias(root, mv.name, mv.version, reason=reason)
    return Outcome(Result.PROMOTED)
