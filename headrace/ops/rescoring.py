"""Re-score a replayed range with a chosen model version into a side topic.

The records go through the scorer's own scoring core (``headrace.scorers.engine.core``): the same
decode for every input kind (tabular, tensors, images, text; JSON, Arrow and raw images), the
same model call and the same predictions as the live scorer writes (a JSON prediction per JSON
record, an Arrow table per Arrow record), so a re-score cannot drift from the stream. Predictions
go to the side topic, same partition number as the source, with ``replay-id`` and
``replay-origin-offset`` headers so a resume can find them. Nothing is committed and no consumer
group is joined: the live scorers never notice.

Rows that cannot be scored (undecodable, missing inputs) are counted and skipped -- the live
scorer already dead-lettered them; a re-score never writes to the live DLQ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from headrace.core.errors import ValidationFailed
from headrace.ops.provenance import REPLAY_ID, REPLAY_ORIGIN_OFFSET
from headrace.ops.replay_checkpoints import ReplayCheckpoint
from headrace.scorers.adapters import select_runtime
from headrace.scorers.engine.core import ScoringCore
from headrace.scorers.engine.models import load_ref
from headrace.scorers.wire.encoding import ARROW_HEADERS, JSON_HEADERS
from headrace.store import versions
from headrace.streams.clients import KafkaConnection
from headrace.streams.consuming import from_messages
from headrace.streams.producing import BatchProducer, produce

RESCORE_MAX_BATCH = 8192


def check_model(root: Path, ref: str) -> versions.ModelVersion:
    """``NAME:VERSION`` that exists and verifies, else one line."""
    if ":" not in ref:
        raise ValidationFailed(f"--model needs NAME:VERSION, not {ref!r}")
    return versions.resolve(root, ref)


class RescoreSink:
    def __init__(self, conn: KafkaConnection, root: Path, cp: ReplayCheckpoint) -> None:
        if cp.model is None:
            raise ValidationFailed("a re-score needs --model NAME:VERSION")
        select_runtime(cp.runtime)  # before the model (and so Keras) is imported
        self.mv = check_model(root, cp.model)
        self.model = load_ref(root=root, ref=cp.model, device="auto",
                              max_batch=RESCORE_MAX_BATCH)
        self.core = ScoringCore()
        self.cp = cp
        self._producer = BatchProducer(conn)
        self.tracker = self._producer.deliveries
        self.rejected = 0
        self._rid = cp.replay_id.encode()

    def write(self, msgs: list[Any]) -> int:
        """Score the records as the live scorer would; the rows scored."""
        if not msgs:
            return 0
        batch = from_messages(msgs)
        out = self.core.score(batch, self.model)
        self.rejected += len(out.letters)
        for values, keys, sources, headers in (
                (out.json_values, out.json_keys, out.json_messages().tolist(), JSON_HEADERS),
                (out.arrow_values, out.arrow_keys, out.arrow_messages, ARROW_HEADERS)):
            for value, key, i in zip(values, keys, sources, strict=True):
                offset = int(batch.offsets[i])
                produce(self._producer.producer, self.cp.target, value, key,
                        [*headers, (REPLAY_ID, self._rid), (REPLAY_ORIGIN_OFFSET, b"%d" % offset)],
                        partition=int(batch.partitions[i]))
        self._producer.poll()
        return out.scored_rows

    def flush(self, *, timeout_s: float) -> None:
        self._producer.flush(timeout_s)
