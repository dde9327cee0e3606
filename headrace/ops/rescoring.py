"""Re-score a replayed range with a chosen model version into a side topic.

Reuses the scorer's embeddable pieces: records are decoded with the stream codecs
(``headrace.streams.codecs.decode_batch``), the model is loaded and run by the scorer's model
adapter (``headrace.scorers``; only the adapters import TensorFlow/MXNet), and each row becomes a
``Prediction`` (source topic/partition/offset, model name+version, scores) -- the same contract
the live scorer writes. Predictions go to the side topic, same partition number as the source,
with ``replay-id`` and ``replay-origin-offset`` headers so a resume can find them. Nothing is
committed and no consumer group is joined: the live scorers never notice.

Rows that cannot be scored (undecodable, missing features) are counted and skipped -- the live
scorer already dead-lettered them; a re-score never writes to the live DLQ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from headrace.contracts import Prediction
from headrace.core.errors import ValidationFailed
from headrace.ops.provenance import REPLAY_ID, REPLAY_ORIGIN_OFFSET
from headrace.ops.replay_checkpoints import ReplayCheckpoint
from headrace.scorers.adapters import ModelFn, adapter_for
from headrace.store import versions
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection
from headrace.streams.codecs import decode_batch
from headrace.streams.producing import BatchProducer, produce

RESCORE_MAX_BATCH = 8192


def check_model(root: Path, ref: str) -> versions.ModelVersion:
    """``NAME:VERSION`` that exists and verifies, else one line."""
    if ":" not in ref:
        raise ValidationFailed(f"--model needs NAME:VERSION, not {ref!r}")
    return versions.resolve(root, ref)


def load_adapter(mv: versions.ModelVersion) -> ModelFn:
    """The chosen version behind the scorer's own compiled, batched model call."""
    return adapter_for(mv.manifest.framework).load(
        version_path=mv.path, manifest=mv.manifest, device="auto", max_batch=RESCORE_MAX_BATCH)


class RescoreSink:
    def __init__(self, conn: KafkaConnection, root: Path, cp: ReplayCheckpoint) -> None:
        if cp.model is None:
            raise ValidationFailed("a re-score needs --model NAME:VERSION")
        self.mv = check_model(root, cp.model)
        self.adapter = load_adapter(self.mv)
        self.cp = cp
        self._producer = BatchProducer(conn)
        self.tracker = self._producer.deliveries
        self.rejected = 0
        self._rid = cp.replay_id.encode()

    def write(self, msgs: list[Any]) -> int:
        if not msgs:
            return 0
        values = [m.value() or b"" for m in msgs]
        ctypes = [hdr.get(m.headers(), hdr.CONTENT_TYPE) for m in msgs]
        batch = decode_batch(values, ctypes)
        self.rejected += len(batch.errors)
        if batch.num_rows == 0:
            return 0
        features = list(self.mv.manifest.features)
        missing = [f for f in features if f not in batch.table.column_names]
        if missing:
            self.rejected += batch.num_rows
            return 0
        x = np.column_stack([batch.table.column(f).to_numpy(zero_copy_only=False)
                             .astype(np.float32) for f in features])
        scores = np.asarray(self.adapter(x), dtype=np.float64)
        if scores.ndim == 1:
            scores = scores[:, None]
        classes = self.mv.manifest.classes
        out = 0
        for row in range(batch.num_rows):
            m = msgs[int(batch.message_index[row])]
            s = scores[row]
            label = classes[int(np.argmax(s))] if classes else None
            key = m.key()
            pred = Prediction(
                key=key.decode("utf-8", "replace") if key else None, source_topic=m.topic(),
                source_partition=m.partition(), source_offset=m.offset(),
                model_name=self.mv.name, model_version=self.mv.version,
                scores=[float(v) for v in s], label=label,
                row=int(batch.row_in_message[row]))
            headers = [*hdr.contract_headers(Prediction.SCHEMA, Prediction.VERSION),
                       (REPLAY_ID, self._rid), (REPLAY_ORIGIN_OFFSET, b"%d" % m.offset())]
            produce(self._producer.producer, self.cp.target, pred.to_bytes(), key, headers,
                    partition=m.partition())
            out += 1
        self._producer.poll()
        return out

    def flush(self, *, timeout_s: float) -> None:
        self._producer.flush(timeout_s)
