"""Offline predictions through the stream's own decode and scoring core (``core``): a record
given here is scored exactly as the same record on ``data.<stream>``, so an offline answer and
the stream's cannot differ (no train/serve or batch/stream skew).

A record is what a producer would send: a JSON object (a mapping, or its JSON text or bytes;
``bytes`` values in a mapping are base64-encoded as ``send`` does for images), an encoded
JPEG/PNG image (a model with one image input), or an Arrow IPC stream of many rows. Each record
gives one output in the stream's prediction format: a JSON prediction as a dict, an Arrow
record's predictions as a ``pyarrow.Table``, and a record that cannot be scored a dict with its
``error`` (what the stream would dead-letter, and why).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa

from headrace.scorers.engine.core import ScoringCore
from headrace.scorers.engine.models import LoadedModel, load_ref
from headrace.streams import headers as hdr
from headrace.streams.codecs import decode_arrow
from headrace.streams.consuming import RawBatch

SOURCE = "offline"  # the source_topic of offline predictions
CHUNK = 1024  # records scored per call of the core
_ARROW = b"\xff\xff\xff\xff"
_IMAGES = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"))

Record: TypeAlias = Mapping[str, Any] | bytes | str
Output: TypeAlias = dict[str, Any] | pa.Table


@dataclass(frozen=True)
class Message:
    """One record as the stream would carry it."""

    key: bytes | None
    value: bytes
    content_type: str


def message(record: Record, key: str | bytes | None) -> Message:
    k = key.encode() if isinstance(key, str) else key
    if isinstance(record, Mapping):
        body = {n: base64.b64encode(v).decode() if isinstance(v, bytes) else v
                for n, v in record.items()}
        return Message(k, json.dumps(body, ensure_ascii=False).encode(), hdr.JSON)
    value = record.encode() if isinstance(record, str) else bytes(record)
    return Message(k, value, content_type(value))


def content_type(value: bytes) -> str:
    """What a producer would label these bytes: Arrow IPC, a PNG/JPEG image, else JSON."""
    if value.startswith(_ARROW):
        return hdr.ARROW
    for magic, ctype in _IMAGES:
        if value.startswith(magic):
            return ctype
    return hdr.JSON


class OfflineModel:
    """A loaded model version with the scorer's core: ``predict(records)``."""

    def __init__(self, model: LoadedModel, *, top_k: int | None = None) -> None:
        self.model = model
        self.core = ScoringCore(top_k=top_k)

    @property
    def ref(self) -> str:
        return f"{self.model.name}:{self.model.version}"

    def predict(self, records: Iterable[Record], *,
                keys: Sequence[str | bytes | None] | None = None) -> list[Output]:
        """One output per record, in order; ``keys`` (default: none) as the stream's keys."""
        items = list(records)
        if keys is not None and len(keys) != len(items):
            raise ValueError(f"{len(keys)} keys for {len(items)} records")
        msgs = [message(r, None if keys is None else keys[i]) for i, r in enumerate(items)]
        out: list[Output] = []
        for lo in range(0, len(msgs), CHUNK):
            out += self._score(msgs[lo:lo + CHUNK], offset=lo)
        return out

    def _score(self, msgs: list[Message], *, offset: int) -> list[Output]:
        n = len(msgs)
        batch = RawBatch([m.value for m in msgs], [m.key for m in msgs], [SOURCE] * n,
                         np.zeros(n, np.int32), np.arange(offset, offset + n, dtype=np.int64),
                         np.full(n, -1, np.int64),
                         [[(hdr.CONTENT_TYPE, m.content_type.encode())] for m in msgs])
        out = self.core.score(batch, self.model)
        results: list[list[Output]] = [[] for _ in range(n)]
        for value, i in zip(out.json_values, out.json_messages().tolist(), strict=True):
            results[i].append(json.loads(value))
        for value, i in zip(out.arrow_values, out.arrow_messages, strict=True):
            results[i].append(decode_arrow(value))
        for letter in out.letters:
            i = int(letter.record.offset) - offset
            if not any(isinstance(r, pa.Table) for r in results[i]) or letter.row is None:
                results[i].append(_refused(msgs[i], letter.stage, letter.error_message,
                                           letter.row))
        # An Arrow record with some bad rows: its table of the good rows is its output.
        return [next((r for r in rs if isinstance(r, pa.Table)), rs[0]) if rs
                else _refused(msgs[i], "decode", "no output", None)
                for i, rs in enumerate(results)]


def _refused(msg: Message, stage: str, why: str, row: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"key": msg.key.decode("utf-8", "replace") if msg.key else None,
                           "error": why, "stage": stage}
    if row is not None:
        out["row"] = row
    return out


def load(root: Path, ref: str, *, device: str = "cpu", max_batch: int = CHUNK,
         top_k: int | None = None) -> OfflineModel:
    """``NAME`` (its production version), ``NAME:VERSION`` or ``NAME@ALIAS``, verified and
    loaded as the scorer loads it."""
    return OfflineModel(load_ref(root=root, ref=ref, device=device, max_batch=max_batch),
                        top_k=top_k)


def read_path(path: Path) -> tuple[list[Record], list[str | None]]:
    """Records and keys from what ``headrace send`` reads: a JSONL, CSV or Parquet file (one
    JSON record a row, as ``send`` makes them; key: the row's ``key`` field, if any) or a folder
    of PNG/JPEG images (one raw image each; key: the file name)."""
    from headrace.streams.sending import (
        json_ready,
        read_image_folder,
        read_records,
        record_keys,
    )

    if path.is_dir():
        table = read_image_folder(path)
        return list(table.column("image").to_pylist()), record_keys(table)
    table = read_records(path)
    return json_ready(table).to_pylist(), record_keys(table)
