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
import pyarrow.compute as pc

from headrace.scorers.wire.encoding import ARROW_SCHEMA, _json_strings, key_strings
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


# -- columnar: the same predictions, built column by column (what the scorer runs) ----------

_F64 = pa.float64()


def _num_strings(values: np.ndarray) -> pa.Array:
    """float32 values as the JSON numbers ``rows`` + msgspec write (the float64 repr)."""
    return pc.cast(pa.array(np.asarray(values, np.float64).ravel(), _F64), pa.string())


def _joined(flat: pa.Array, n: int, k: int, sep: str = ",") -> pa.Array:
    """``n`` strings, each ``k`` consecutive items of ``flat`` joined by ``sep``."""
    offsets = pa.array(np.arange(0, n * k + 1, k, dtype=np.int32))
    return pc.binary_join(pa.ListArray.from_arrays(offsets, flat), sep)


@dataclass(frozen=True)
class _Head:
    """One output of a batch, columnar: what ``_head`` gives per row."""

    y: np.ndarray  # (n, width) float32
    classes: Sequence[str]
    label: np.ndarray | None  # index of the top class per row; None for values
    order: np.ndarray | None  # (n, k) indices of the k best classes; None without top-k

    @classmethod
    def of(cls, out: ModelOutput, y: np.ndarray, k: int) -> _Head:
        y = np.asarray(y, np.float32).reshape(len(y), -1)
        if out.kind != OutputKind.CLASSES:
            return cls(y, (), None, None)
        label = np.argmax(y, axis=1) if len(y) else np.zeros(0, np.int64)
        order = np.argsort(-y, axis=1, kind="stable")[:, :k] if k else None
        return cls(y, out.classes, label, order)

    def take(self, idx: slice) -> _Head:
        return _Head(self.y[idx], self.classes,
                     None if self.label is None else self.label[idx],
                     None if self.order is None else self.order[idx])

    def json(self) -> tuple[pa.Array, pa.Array | pa.Scalar, pa.Array | None]:
        """(scores ``a,b``, label literal, top-k ``{..},{..}`` or None) as JSON fragments."""
        n, w = self.y.shape
        scores = _joined(_num_strings(self.y), n, w)
        if self.label is None:
            return scores, pa.scalar("null"), None
        names = pa.array([json.dumps(c) for c in self.classes], pa.string())
        label = names.take(pa.array(self.label))
        if self.order is None:
            return scores, label, None
        k = self.order.shape[1]
        items = pc.binary_join_element_wise(
            '{"label":', names.take(pa.array(self.order.ravel())),
            ',"score":', _num_strings(np.take_along_axis(self.y, self.order, axis=1)), "}", "")
        return scores, label, _joined(items, n, k)

    def json_object(self) -> pa.Array:
        """``{"scores":[..],"label":..[,"top_k":[..]]}`` per row (an entry of ``outputs``)."""
        scores, label, top = self.json()
        parts: list[Any] = ['{"scores":[', scores, '],"label":', label]
        if top is not None:
            parts += [',"top_k":[', top, "]"]
        return pc.binary_join_element_wise(*parts, "}", "")

    def arrow(self) -> tuple[pa.Array, pa.Array, pa.Array]:
        """(scores, label, top_k) columns of ``GENERAL_ARROW_SCHEMA``."""
        n, w = self.y.shape
        offsets = pa.array(np.arange(0, n * w + 1, w, dtype=np.int32))
        scores = pa.ListArray.from_arrays(offsets, pa.array(self.y.ravel(), pa.float32()))
        if self.label is None:
            return scores, pa.nulls(n, pa.string()), pa.nulls(n, ARROW_EXTRA[0][1])
        names = pa.array(list(self.classes), pa.string())
        label = names.take(pa.array(self.label))
        if self.order is None:
            return scores, label, pa.nulls(n, ARROW_EXTRA[0][1])
        k = self.order.shape[1]
        items = pa.StructArray.from_arrays(
            [names.take(pa.array(self.order.ravel())),
             pa.array(np.take_along_axis(self.y, self.order, axis=1).ravel(), pa.float32())],
            names=["label", "score"])
        top = pa.ListArray.from_arrays(pa.array(np.arange(0, n * k + 1, k, dtype=np.int32)),
                                       items, type=ARROW_EXTRA[0][1])
        return scores, label, top


class Columns:
    """The predictions of a batch, column by column; ``json_lines`` / ``arrow_table`` give the
    same records as ``rows`` + ``json_lines`` / ``arrow_table`` without a Python dict a row."""

    def __init__(self, outputs: Sequence[tuple[ModelOutput, np.ndarray]], src: Source, *,
                 model_name: str, model_version: int, top_k: int | None) -> None:
        self.names = [o.name for o, _ in outputs]
        self.heads = [_Head.of(o, y, top_k_for(o, top_k)) for o, y in outputs]
        self.src = src
        self.model_name = model_name
        self.model_version = model_version

    def _source(self, s: int, e: int) -> tuple[Sequence[bytes | None], Sequence[str],
                                                np.ndarray, np.ndarray, np.ndarray]:
        src = self.src
        return (src.keys[s:e], src.topics[s:e], src.partitions[s:e], src.offsets[s:e],
                src.rows[s:e])

    def json_lines(self, s: int = 0, e: int | None = None) -> list[bytes]:
        """Rows ``s:e`` as JSON Predictions, one ``bytes`` each."""
        e = len(self.src.rows) if e is None else e
        if e <= s:
            return []
        keys, topics, parts, offs, rws = self._source(s, e)
        heads = [h.take(slice(s, e)) for h in self.heads]
        scores, label, top = heads[0].json()
        only = topics[0] if topics.count(topics[0]) == len(topics) else None  # C, not a genexpr
        topic: pa.Array | pa.Scalar = (pa.scalar(json.dumps(only)) if only is not None
                                       else pa.array([json.dumps(t) for t in topics], pa.string()))
        parts_: list[Any] = [
            '{"key":', _json_strings(key_strings(keys)),
            ',"source_topic":', topic,
            ',"source_partition":', pc.cast(pa.array(np.asarray(parts, np.int64)), pa.string()),
            ',"source_offset":', pc.cast(pa.array(np.asarray(offs, np.int64)), pa.string()),
            ',"model_name":' + json.dumps(self.model_name)
            + f',"model_version":{int(self.model_version)},"scores":[', scores,
            '],"label":', label,
            ',"row":', pc.cast(pa.array(np.asarray(rws, np.int64)), pa.string()),
            ',"schema_version":1',
        ]
        if top is not None:
            parts_ += [',"top_k":[', top, "]"]
        if len(heads) > 1:
            parts_.append(',"outputs":{')
            for j, (name, h) in enumerate(zip(self.names, heads, strict=True)):
                parts_ += [("," if j else "") + json.dumps(name) + ":", h.json_object()]
            parts_.append("}")
        lines = pc.binary_join_element_wise(*parts_, "}", "")
        out: list[bytes] = lines.cast(pa.binary()).to_numpy(zero_copy_only=False).tolist()
        return out

    def arrow_table(self, s: int = 0, e: int | None = None) -> pa.Table:
        """Rows ``s:e`` as one table of ``GENERAL_ARROW_SCHEMA`` (one Arrow input message)."""
        e = len(self.src.rows) if e is None else e
        keys, topics, parts, offs, rws = self._source(s, e)
        n = e - s
        heads = [h.take(slice(s, e)) for h in self.heads]
        scores, label, top = heads[0].arrow()
        outputs = (pc.binary_join_element_wise(
            *[p for j, (name, h) in enumerate(zip(self.names, heads, strict=True))
              for p in (("{" if j == 0 else ",") + json.dumps(name) + ":", h.json_object())],
            "}", "") if len(heads) > 1 else pa.nulls(n, pa.string()))
        return pa.Table.from_arrays([
            pa.array(list(topics), pa.string()),
            pa.array(np.asarray(parts, np.int32)),
            pa.array(np.asarray(offs, np.int64)),
            pa.array(np.asarray(rws, np.int32)),
            key_strings(keys),
            pc.fill_null(pa.nulls(n, pa.string()), self.model_name),
            pa.array(np.full(n, self.model_version, np.int32)),
            scores, label, top, outputs,
        ], schema=GENERAL_ARROW_SCHEMA)
