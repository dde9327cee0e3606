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
import logging
from contextlib import suppress
from typing import Protocol

import numpy as np
import pyarrow as pa

from headrace.core.errors import PermanentError, RecordRef, ValidationFailed
from headrace.scorers.wire.splitting import Part
from headrace.streams.codecs import arrow_flags, decode_arrow
from headrace.streams.consuming import RawBatch
from headrace.streams.dlq import DeadLetter
from headrace.streams.producing import Refused

log = logging.getLogger(__name__)
STAGE = "produce"


class Outputs(Protocol):
    """What a batch publishes (the worker's ``Outputs``)."""

    json_values: list[bytes]
    json_keys: list[bytes | None]
    arrow_values: list[bytes]
    arrow_keys: list[bytes | None]
    parts: list[Part]
    letters: list[DeadLetter]
    batch: RawBatch | None


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


def take_out(out: Outputs, gone: list[Refused], predictions_topic: str) -> list[DeadLetter]:
    """Remove refused predictions from ``out`` (they are never produced again) and dead-letter
    their inputs, once each (an input already dead-lettered whole is left alone); the new dead
    letters, also added to ``out``. A refused dead letter has nowhere left to go: logged."""
    mine = [r for r in gone if r.topic == predictions_topic]
    for r in gone:
        if r.topic != predictions_topic:
            log.error("the producer refused a dead letter of %d bytes for %s (%s); dropped",
                      len(r.value or b""), r.topic, r.reason)
    values = {r.value for r in mine if r.value is not None}
    out.json_values, out.json_keys = without(out.json_values, out.json_keys, values)
    out.arrow_values, out.arrow_keys = without(out.arrow_values, out.arrow_keys, values)
    out.parts = [p for p in out.parts if p.value not in values]
    if out.batch is None or not mine:
        return []
    batch = out.batch
    whole = {input_index(batch, int(x.record.partition), int(x.record.offset))
             for x in out.letters if x.row is None}
    new = dead_letters(batch, mine, skip={i for i in whole if i is not None})
    for letter in new:
        log.warning("dead-lettered %s/%d/%d: %s", letter.record.topic, letter.record.partition,
                    letter.record.offset, letter.error_message)
    out.letters += new
    return new


def without(values: list[bytes], keys: list[bytes | None], gone: set[bytes]
            ) -> tuple[list[bytes], list[bytes | None]]:
    """``values`` and their ``keys`` less the refused ones."""
    keep = [j for j, v in enumerate(values) if v not in gone]
    if len(keep) == len(values):
        return values, keys
    return [values[j] for j in keep], [keys[j] for j in keep]
