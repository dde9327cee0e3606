"""Tiny real model versions made "by a training job": the job's request.json on the DFS (as
``trainers.jobs.create_request`` writes it) and a manifest that names the job and dataset."""

from __future__ import annotations

import hashlib
from pathlib import Path

from headrace.contracts import TrainRequested, Trigger, TriggerKind
from headrace.store.manifest import DatasetIdentity, Manifest
from headrace.store.versions import ModelVersion, publish, set_alias
from headrace.trainers.jobs import create_request
from tests.scorers.conftest import CLASSES, FEATURES


def trained_tf(root: Path, name: str, *, seed: int, dataset: str) -> tuple[ModelVersion,
                                                                           TrainRequested]:
    import keras

    req = TrainRequested(idempotency_key=f"{name}-{seed}", model_name=name,
                         framework="tensorflow", dataset_uri=dataset,
                         trigger=Trigger(kind=TriggerKind.SCHEDULE, source="nightly"))
    job_id, created = create_request(root, req)
    assert created
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((len(FEATURES),)),
                              keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(len(CLASSES), activation="softmax")])
    data = (root / dataset).read_bytes()
    manifest = Manifest(name=name, framework="tensorflow", task="classifier",
                        features=FEATURES, label="y", classes=CLASSES, job_id=job_id,
                        trigger_event_id=req.event_id,
                        dataset=DatasetIdentity(uri=dataset,
                                                fingerprint=hashlib.sha256(data).hexdigest(),
                                                rows=300))
    mv = publish(root, manifest, lambda d: model.save(d / "model.keras"))
    set_alias(root, name, mv.version)
    return mv, req
