"""A DFS as trainers leave it, for the dashboard tests: one model's versions with each gate
outcome, and job directories in both status formats (the older ``promoted``/``gate_reasons``
and issue 23's ``result``/``reason``/``held_by`` with ``history.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from headrace.contracts import Framework, Task
from headrace.store import versions
from headrace.store.dfs import jobs_dir
from headrace.store.manifest import Manifest

MATRIX = [[40, 2, 1], [3, 35, 4], [0, 5, 50]]
KEPT_WHY = ("iris:1 not promoted: production is at the newer iris:2; a re-run never moves "
            "production backwards (`headrace models promote iris:1` does it on purpose)")
REFUSED_WHY = ["accuracy 0.4100 < min 0.8000", "recall of class c 0.0000 < min 0.5000"]
LEGACY_WHY = ["accuracy 0.3900 is not above the majority class 0.3700 + 0.0500"]

# Loss falls then rises (early stopping restores epoch 3); accuracy has a gap at epoch 2.
HISTORY: dict[str, Any] = {
    "epochs": [
        {"epoch": 1, "loss": 1.05, "val_loss": 1.08, "accuracy": 0.41, "val_accuracy": 0.38,
         "learning_rate": 0.001},
        {"epoch": 2, "loss": 0.81, "val_loss": 0.86, "accuracy": None, "val_accuracy": 0.52,
         "learning_rate": 0.001},
        {"epoch": 3, "loss": 0.62, "val_loss": 0.71, "accuracy": 0.74, "val_accuracy": 0.69,
         "learning_rate": 0.0005},
        {"epoch": 4, "loss": 0.55, "val_loss": 0.74, "accuracy": 0.79, "val_accuracy": 0.68,
         "learning_rate": 0.0005},
        {"epoch": 5, "loss": 0.49, "val_loss": 0.79, "accuracy": 0.83, "val_accuracy": 0.66,
         "learning_rate": 0.00025},
    ],
    "epochs_run": 5, "best_epoch": 3, "stopped_because": "early_stopping",
}


def _files(d: Path) -> None:
    (d / "weights.bin").write_bytes(b"\0" * 16)


def publish(root: Path, name: str, *, accuracy: float, job_id: str,
            gate: dict[str, Any]) -> int:
    mv = versions.publish(root, Manifest(
        name=name, framework=Framework.TENSORFLOW, task=Task.CLASSIFIER,
        features=("f0", "f1"), label="label", classes=("a", "b", "c"),
        metrics={"accuracy": accuracy, "macro_f1": accuracy - 0.02, "loss": 1 - accuracy,
                 "recall.a": accuracy, "recall.b": accuracy, "recall.c": accuracy},
        confusion_matrix=MATRIX, job_id=job_id, extra={"gate": gate}), _files)
    return mv.version


def job(root: Path, job_id: str, *, history: dict[str, Any] | None = None,
        **status: Any) -> Path:
    d = jobs_dir(root) / job_id
    d.mkdir(parents=True, exist_ok=True)
    body = {"job_id": job_id, "framework": "tensorflow", "state": "succeeded", "attempts": 1,
            "created_at": "2026-11-24T20:00:00+00:00", **status}
    (d / "status.json").write_text(json.dumps(body))
    if history is not None:
        (d / "history.json").write_text(json.dumps(history))
    return d


def write_dfs(root: Path, name: str = "iris") -> dict[str, str]:
    """iris:1 kept (promotion off), iris:2 production, iris:3 refused (new status format,
    with curves), iris:4 refused (old format: the manifest's gate tells); ``wine`` refused
    without a stored version. Returns job id -> expected outcome."""
    passed = {"passed": True, "reasons": [], "promote": True, "held_by": []}
    publish(root, name, accuracy=0.81, job_id="job-kept",
            gate={**passed, "promote": False})
    v2 = publish(root, name, accuracy=0.88, job_id="job-1", gate=passed)
    versions.set_alias(root, name, v2)
    publish(root, name, accuracy=0.41, job_id="job-refused",
            gate={"passed": False, "reasons": REFUSED_WHY, "held_by": ["min", "class_recall"]})
    publish(root, name, accuracy=0.39, job_id="job-legacy",
            gate={"passed": False, "reasons": LEGACY_WHY, "held_by": ["baseline"]})
    job(root, "job-kept", model_name=name, version=1, promoted=False, gate_reasons=[KEPT_WHY],
        metrics={"accuracy": 0.81})
    job(root, "job-refused", model_name=name, version=3, result="refused",
        reason="; ".join(REFUSED_WHY), held_by=["min", "class_recall"],
        metrics={"accuracy": 0.41}, history=HISTORY)
    job(root, "job-legacy", model_name=name, version=4, promoted=False,
        gate_reasons=LEGACY_WHY, metrics={"accuracy": 0.39})
    job(root, "job-unstored", model_name="wine", result="refused",
        reason="accuracy 0.3000 < min 0.9000", held_by=["min"], metrics={"accuracy": 0.3})
    return {"job-kept": "kept", "job-refused": "refused", "job-legacy": "refused",
            "job-unstored": "refused"}
