"""Dead letters: the original bytes plus headers that say where they came from and why."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from functools import cached_property

from headrace.core.errors import HeadraceError, RecordRef
from headrace.streams import headers as hdr

DLQ_TOPIC = "dlq.source-topic"
DLQ_PARTITION = "dlq.source-partition"
DLQ_OFFSET = "dlq.source-offset"
DLQ_STAGE = "dlq.stage"
DLQ_ERROR_CLASS = "dlq.error-class"
DLQ_ERROR_MESSAGE = "dlq.error-message"
DLQ_TIMESTAMP = "dlq.timestamp"
DLQ_ROW = "dlq.row"  # for a bad row inside an Arrow batch
DLQ_TRUNCATED_FROM = "dlq.value-truncated-from"  # original size when the value was cut
DLQ_VALUE_SHA256 = "dlq.value-sha256"
DLQ_SCHEMA_ID = "dlq.schema-id"  # a Schema Registry wire-format record's schema id
# A dead letter must fit where its cause did not: its key, value and headers weigh at most this
# (librdkafka's default message.max.bytes, under Apache Kafka's topic default of 1,048,588);
# an oversized value is cut to what is left, with its size and hash.
MAX_DLQ_MESSAGE_BYTES = 1_000_000
FRAMING_BYTES = 1024  # the record's and its batch's framing, and the truncation headers
MAX_ERROR_CHARS = 2000


@dataclass(frozen=True)
class DeadLetter:
    record: RecordRef
    stage: str
    error_class: str
    error_message: str
    row: int | None = None
    schema_id: int | None = None

    @classmethod
    def from_error(cls, record: RecordRef, exc: BaseException, *, stage: str = "",
                   row: int | None = None) -> DeadLetter:
        st = stage or (exc.stage if isinstance(exc, HeadraceError) else "") or "unknown"
        schema_id = getattr(exc, "schema_id", None)  # a registry record's (SchemaRecordFailed)
        return cls(record, st, type(exc).__name__, str(exc) or type(exc).__name__, row,
                   schema_id if isinstance(schema_id, int) else None)

    @cached_property
    def value_limit(self) -> int:
        """The most value bytes this letter can carry within ``MAX_DLQ_MESSAGE_BYTES``."""
        around = hdr.weight(self.record.key, self._own_headers() + self._about())
        return max(0, MAX_DLQ_MESSAGE_BYTES - around - FRAMING_BYTES)

    @property
    def truncated(self) -> bool:
        return len(self.record.value or b"") > self.value_limit

    def payload(self) -> bytes | None:
        value = self.record.value
        return value[:self.value_limit] if value is not None and self.truncated else value

    def headers(self) -> hdr.Headers:
        # Keep the record's own headers (content-type etc.) so a redrive is byte-identical.
        return self._own_headers() + self._about() + hdr.build({
            DLQ_TRUNCATED_FROM: len(self.record.value or b"") if self.truncated else None,
            DLQ_VALUE_SHA256: hashlib.sha256(self.record.value or b"").hexdigest()
            if self.truncated else None,
        })

    def _own_headers(self) -> hdr.Headers:
        return [(k, v) for k, v in self.record.headers if not k.startswith("dlq.")]

    def _about(self) -> hdr.Headers:
        """Where the record came from and why it is here."""
        return hdr.build({
            DLQ_TOPIC: self.record.topic,
            DLQ_PARTITION: self.record.partition,
            DLQ_OFFSET: self.record.offset,
            DLQ_STAGE: self.stage,
            DLQ_ERROR_CLASS: self.error_class,
            DLQ_ERROR_MESSAGE: self.error_message[:MAX_ERROR_CHARS],
            DLQ_TIMESTAMP: int(time.time() * 1000),
            DLQ_ROW: self.row,
            DLQ_SCHEMA_ID: self.schema_id,
        })

