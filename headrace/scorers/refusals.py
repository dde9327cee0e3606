"""Outputs the producer refused for what they are, traced back to the input that made them.

A prediction the client or the broker refuses as too large (or as an invalid record) would be
refused again each time the batch is produced again: the scorer would retry forever, or (before)
the error escaped the loop and the restarted scorer met the same offset: a poison pill. Instead
the input message is dead-lettered with the producer's reason, its offset is committed with the
batch, and the rest of the batch is published as usual.

Each prediction names its source (``source_partition``, ``source_offset``, in JSON and in Arrow
alike), so the refused value alone says which input it came from; nothing is kept per output on
the hot path.
"""

from __future__ import annotations

import json
from contextlib import suppress

import numpy as np
import pyarrow as pa

from headrace.core.errors import PermanentError, RecordRef, ValidationFailed
from headrace.streams.codecs import arrow_flags, decode_arrow
from headrace.streams.consuming import RawBatch
from headrace.streams.dlq import DeadLetter
from headrace.streams.producing import Refused

STAGE = "produce"


class OutputRefused(PermanentError):
    """The producer refused this input's predictions; producing them again cannot help."""


def source_of(value: bytes | None) -> tuple[int, int] | None:
    """(partition, offset) of the input a prediction came from, read from the prediction."""
    if not value:
        return None
    with suppress(ValidationFailed, ValueError, KeyError, TypeError, pa.ArrowException):
        if next(arrow_flags([value])):
            t = decode_arrow(value)
            return (int(t.column("source_partition")[0].as_py()),
                    int(t.column("source_offset")[0].as_py()))
        rec = json.loads(value)
        return int(rec["source_partition"]), int(rec["source_offset"])
    return None


def input_index(batch: RawBatch, partition: int, offset: int) -> int | None:
    hits = np.flatnonzero((batch.partitions == partition) & (batch.offsets == offset))
    return int(hits[0]) if len(hits) else None


def input_ref(batch: RawBatch, i: int, value: bytes | None = None) -> RecordRef:
    """The batch's message ``i`` as a dead letter's record (``value``: instead of its own)."""
    return RecordRef(
        topic=batch.topics[i], partition=int(batch.partitions[i]),
        offset=int(batch.offsets[i]), key=batch.keys[i],
        value=batch.values[i] if value is None else value,
        headers=tuple(batch.headers_of(i)), timestamp_ms=int(batch.timestamps_ms[i]),
    )


def dead_letters(batch: RawBatch, refusals: list[Refused], *, skip: set[int]) -> list[DeadLetter]:
    """One dead letter per input whose outputs were refused (inputs in ``skip`` and those
    already given one here are left out; ``skip`` is updated)."""
    out: list[DeadLetter] = []
    for r in refusals:
        src = source_of(r.value)
        i = None if src is None else input_index(batch, *src)
        if i is None or i in skip:
            continue
        skip.add(i)
        err = OutputRefused(f"the producer refused a prediction of {len(r.value or b'')} bytes "
                            f"made from this message ({r.reason})", stage=STAGE)
        out.append(DeadLetter.from_error(input_ref(batch, i), err, stage=STAGE))
    return out


def without(values: list[bytes], keys: list[bytes | None], gone: set[bytes]
            ) -> tuple[list[bytes], list[bytes | None]]:
    """``values`` and their ``keys`` less the refused ones."""
    keep = [j for j, v in enumerate(values) if v not in gone]
    if len(keep) == len(values):
        return values, keys
    return [values[j] for j in keep], [keys[j] for j in keep]
