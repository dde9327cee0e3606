"""Predictions of models with a signature (images, text, tensors, several inputs or outputs).

Each row's prediction keeps the tabular format (key, source topic/partition/offset, model
name+version, ``scores``, ``label``, ``row``) for its first output, and adds ``top_k`` (the k
best labels with their scores) for classifiers with many classes and ``outputs`` (each output
by name) for models with several. Tabular models keep the vectorised encoder in ``encoding``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from headrace.scorers.encoding import ARROW_SCHEMA
from headrace.store.signature import ModelOutput, OutputKind

DEFAULT_TOP_K = 5
MANY_CLASSES = 10  # more classes than this: top-k by default

_encode = msgspec.json.Encoder().encode

ARROW_EXTRA = [
    ("top_k", pa.list_(pa.struct([("label", pa.string()), ("score", pa.float32())]))),
    ("outputs", pa.string()),  # JSON object, several outputs only
]
GENERAL_ARROW_SCHEMA = pa.schema([*ARROW_SCHEMA, *ARROW_EXTRA])


def top_k_for(output: ModelOutput, setting: int | None) -> int:
    """How many labels ``top_k`` lists: the setting (0: none), else 5 for > 10 classes."""
    if output.kind != OutputKind.CLASSES:
        return 0
    n = len(output.classes)
    if setting is not None:
        return min(setting, n)
    return min(DEFAULT_TOP_K, n) if n > MANY_CLASSES else 0


@dataclass(frozen=True)
class Source:
    """Where each predicted row came from."""

    keys: Sequence[bytes | None]
    topics: Sequence[str]
    partitions: np.ndarray
    offsets: np.ndarray
    rows: np.ndarray


def _head(out: ModelOutput, y: np.ndarray, k: int) -> list[dict[str, Any]]:
    """Per row: scores (or values), label and top-k of one output, vectorised per column."""
    y = np.asarray(y, np.float32).reshape(len(y), -1)
    scores = y.tolist()
    if out.kind != OutputKind.CLASSES:
        return [{"scores": s, "label": None} for s in scores]
    names = np.asarray(out.classes, object)
    labels = names[np.argmax(y, axis=1)].tolist() if len(y) else []
    if not k:
        return [{"scores": s, "label": lb} for s, lb in zip(scores, labels, strict=True)]
    order = np.argsort(-y, axis=1, kind="stable")[:, :k]
    top_names = names[order].tolist()
    top_scores = np.take_along_axis(y, order, axis=1).tolist()
    return [{"scores": s, "label": lb,
             "top_k": [{"label": a, "score": b} for a, b in zip(tn, ts, strict=True)]}
            for s, lb, tn, ts in zip(scores, labels, top_names, top_scores, strict=True)]


def rows(outputs: Sequence[tuple[ModelOutput, np.ndarray]], src: Source, *, model_name: str,
         model_version: int, top_k: int | None) -> list[dict[str, Any]]:
    """One Prediction dict per row."""
    heads = [_head(o, y, top_k_for(o, top_k)) for o, y in outputs]
    keys = [None if k is None else k.decode("utf-8", "replace") for k in src.keys]
    out = []
    names = [o.name for o, _ in outputs]
    for i, (key, topic, part, off, row) in enumerate(zip(
            keys, src.topics, src.partitions.tolist(), src.offsets.tolist(), src.rows.tolist(),
            strict=True)):
        first = heads[0][i]
        rec: dict[str, Any] = {
            "key": key, "source_topic": topic, "source_partition": part, "source_offset": off,
            "model_name": model_name, "model_version": model_version,
            "scores": first["scores"], "label": first["label"], "row": row,
            "schema_version": 1,
        }
        if "top_k" in first:
            rec["top_k"] = first["top_k"]
        if len(heads) > 1:
            rec["outputs"] = {n: h[i] for n, h in zip(names, heads, strict=True)}
        out.append(rec)
    return out


def json_lines(recs: list[dict[str, Any]]) -> list[bytes]:
    return [_encode(r) for r in recs]


def arrow_table(recs: list[dict[str, Any]]) -> pa.Table:
    """The predictions of one Arrow input message, the tabular columns plus ``top_k`` and
    ``outputs`` (a JSON object, when the model has several)."""
    cols: dict[str, list[Any]] = {f.name: [] for f in GENERAL_ARROW_SCHEMA}
    for r in recs:
        for name in cols:
            v = r.get(name)
            if name == "outputs" and v is not None:
                v = json.dumps(v)
            cols[name].append(v)
    return pa.Table.from_pydict(cols, schema=GENERAL_ARROW_SCHEMA)
