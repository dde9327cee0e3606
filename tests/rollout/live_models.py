"""Real models and real LiveCounts for the live-evidence tests.

Three tiny Keras versions of one model on records whose truth is ``yes`` when a + b > 0:
v1 untrained (production), v2 trained on the truth (a better candidate), v3 trained on the
flipped truth (a deliberately worse one). ``publish_live_counts`` is the contract with the
shadow tap: it reads the records back from the real data topic, scores them offline with
both versions (``headrace.models.load``) and publishes one ``LiveCounts`` per partition, as
a shadow scorer with labels joined would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from headrace import models
from headrace.contracts import LiveCounts, RolloutRole
from headrace.store.manifest import Manifest
from headrace.store.versions import ModelVersion, publish, set_alias
from headrace.streams.clients import KafkaConnection
from headrace.streams.producing import send_events
from tests.fixtures import read_all
from tests.scorers.conftest import CLASSES, FEATURES

FLIP = {"no": "yes", "yes": "no"}


def truth_of(record: dict[str, Any]) -> str:
    return "yes" if record["a"] + record["b"] > 0 else "no"


def publish_version(root: Path, name: str, *, train: str | None, seed: int,
                    alias: bool = False) -> ModelVersion:
    """``train``: None (untrained), "truth" or "flipped"."""
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((len(FEATURES),)),
                              keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(len(CLASSES), activation="softmax")])
    if train is not None:
        rng = np.random.default_rng(seed)
        x = rng.normal(size=(1500, len(FEATURES))).astype(np.float32)
        y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
        if train == "flipped":
            y = 1 - y
        model.compile(optimizer=keras.optimizers.Adam(0.05),
                      loss="sparse_categorical_crossentropy")
        model.fit(x, y, epochs=8, batch_size=128, verbose=0)
    manifest = Manifest(name=name, framework="tensorflow", task="classifier",
                        features=FEATURES, label="y", classes=CLASSES)
    mv = publish(root, manifest, lambda d: model.save(d / "model.keras"))
    if alias:
        set_alias(root, name, mv.version)
    return mv


@dataclass
class Offline:
    """The offline recount over every record, in plain numpy: what the live figures must
    equal. ``matrix``: production class x candidate class; the truth matrices: truth x
    predicted; ``only_*_right``: McNemar's discordant labelled records."""

    matrix: np.ndarray
    production_truth: np.ndarray
    candidate_truth: np.ndarray
    rows: int = 0
    only_production_right: int = 0
    only_candidate_right: int = 0

    @property
    def agreement(self) -> float:
        return float(np.trace(self.matrix)) / self.rows

    def right(self, truth: np.ndarray) -> int:
        return int(np.trace(truth))


def publish_live_counts(conn: KafkaConnection, root: Path, *, topic: str, data: str,
                        stream: str, name: str, production: int, candidate: int,
                        labelled: bool = True) -> Offline:
    records = read_all(conn, data)
    prod = models.load(f"{name}:{production}", dfs_root=root)
    cand = models.load(f"{name}:{candidate}", dfs_root=root)
    k = len(CLASSES)
    total = Offline(*(np.zeros((k, k), np.int64) for _ in range(3)))
    counts: list[LiveCounts] = []
    for part in sorted({r.partition for r in records}):
        recs = [r for r in records if r.partition == part]
        values = [r.value or b"" for r in recs]
        p_out, c_out = prod.predict(values), cand.predict(values)
        p = np.array([CLASSES.index(o["label"]) for o in p_out])  # type: ignore[index]
        c = np.array([CLASSES.index(o["label"]) for o in c_out])  # type: ignore[index]
        t = np.array([CLASSES.index(truth_of(json.loads(v))) for v in values])
        matrix = np.zeros((k, k), np.int64)
        np.add.at(matrix, (p, c), 1)
        pt, ct = np.zeros((k, k), np.int64), np.zeros((k, k), np.int64)
        b = c_right = 0
        if labelled:
            np.add.at(pt, (t, p), 1)
            np.add.at(ct, (t, c), 1)
            b = int(((p == t) & (c != t)).sum())
            c_right = int(((c == t) & (p != t)).sum())
        total.matrix += matrix
        total.production_truth += pt
        total.candidate_truth += ct
        total.only_production_right += b
        total.only_candidate_right += c_right
        total.rows += len(recs)
        counts.append(LiveCounts(
            stream=stream, model_name=name, production_version=production,
            candidate_version=candidate, role=RolloutRole.SHADOW, partition=part,
            next_offset=recs[-1].offset + 1, classes=list(CLASSES), rows=len(recs),
            matrix=matrix.tolist(),
            production_confidence=float(sum(max(o["scores"]) for o in p_out)),  # type: ignore[index]
            candidate_confidence=float(sum(max(o["scores"]) for o in c_out)),  # type: ignore[index]
            labelled=len(recs) if labelled else 0,
            production_truth=pt.tolist() if labelled else [],
            candidate_truth=ct.tolist() if labelled else [],
            only_production_right=b, only_candidate_right=c_right))
    send_events(conn, topic, counts, key_of=lambda c: c.key())
    return total
