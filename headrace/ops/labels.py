"""``headrace labels send STREAM FILE``: late truth onto ``labels.<stream>``, as the scorer's
label join reads it (scorers/rollout/label_join.py): each label keyed by its record's key (the same
UTF-8 bytes ``send`` and ``predict`` key records with, so the join finds the prediction) with
the value ``{"label": CLASS}``, produced with the same client and partitioner as the records
(librdkafka's default), so a label lands on its record's partition when the topics have as
many partitions. Every value is checked with the join's own parser before anything is sent.

FILE is JSONL (``{"key": ..., "label": ...}`` a line) or CSV (``.csv``: a header with both
columns). A file with a bad line is refused whole, naming the lines and why, never their
contents; nothing is sent from it.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headrace.core.errors import ValidationFailed
from headrace.scorers.rollout.label_join import parse_label
from headrace.streams.clients import KafkaConnection, ensure_topics, partition_count
from headrace.streams.producing import BatchProducer
from headrace.streams.topics import TopicSpec, data_topic, labels_topic

MAX_LINE_BYTES = 64 * 1024
MAX_SHOWN = 5


@dataclass(frozen=True)
class LabelsSent:
    topic: str
    sent: int
    created: bool  # the topic was created now (which turns the scorers' join on)


def read_labels(path: Path, *, key_column: str = "key", label_column: str = "label"
                ) -> list[tuple[bytes, bytes]]:
    """(key, value) pairs ready to produce; ValidationFailed names the bad lines."""
    pairs: list[tuple[bytes, bytes]] = []
    bad: list[str] = []
    for line_no, row in _rows(path):
        why = _why_bad(row, key_column, label_column)
        if why:
            bad.append(f"line {line_no}: {why}")
            continue
        assert isinstance(row, dict)
        key, label = row[key_column], row[label_column]
        value = json.dumps({"label": label}).encode()
        if parse_label(value) is None:  # what the join would count as unknown
            bad.append(f"line {line_no}: the label is not a class name or number")
            continue
        pairs.append((str(key).encode(), value))
    if bad:
        more = f" (and {len(bad) - MAX_SHOWN} more)" if len(bad) > MAX_SHOWN else ""
        raise ValidationFailed(f"{path.name}: {len(bad)} bad lines, nothing sent: "
                               + "; ".join(bad[:MAX_SHOWN]) + more)
    if not pairs:
        raise ValidationFailed(f"{path.name}: no labels in the file")
    return pairs


def send_labels(conn: KafkaConnection, stream: str, path: Path, *, key_column: str = "key",
                label_column: str = "label", timeout_s: float = 30.0) -> LabelsSent:
    """Publish the file's labels to ``labels.<stream>``; creates the topic (with as many
    partitions as the stream's data topic) if it is missing."""
    pairs = read_labels(path, key_column=key_column, label_column=label_column)
    topic = labels_topic(stream)
    created = False
    if partition_count(conn, topic) is None:
        partitions = partition_count(conn, data_topic(stream)) or 1
        created = bool(ensure_topics(conn, [TopicSpec(topic, partitions,
                                                      f"late labels of {stream}")]))
    producer = BatchProducer(conn)
    try:
        refused = producer.produce_many(topic, [v for _, v in pairs], [k for k, _ in pairs], [])
        if refused:
            raise ValidationFailed(f"{len(refused)} labels refused by the client: "
                                   f"{refused[0].reason}")
        producer.flush(timeout_s)
    finally:
        producer.close(timeout_s)
    return LabelsSent(topic, len(pairs), created)


def _rows(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            if path.suffix.lower() == ".csv":
                for i, row in enumerate(csv.DictReader(fh), start=2):
                    yield i, row
                return
            for i, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                if len(line) > MAX_LINE_BYTES:
                    yield i, None
                    continue
                try:
                    yield i, json.loads(line)
                except (ValueError, RecursionError):
                    yield i, "not JSON"
    except UnicodeDecodeError:
        raise ValidationFailed(f"{path.name}: not UTF-8 text") from None
    except OSError as exc:
        raise ValidationFailed(f"{path.name}: {exc.strerror or type(exc).__name__}") from None


def _why_bad(row: Any, key_column: str, label_column: str) -> str:
    if row is None:
        return f"longer than {MAX_LINE_BYTES} bytes"
    if row == "not JSON":
        return "not JSON"
    if not isinstance(row, dict):
        return "not an object"
    key, label = row.get(key_column), row.get(label_column)
    if isinstance(key, bool) or not isinstance(key, str | int) or key == "":
        return f"no {key_column!r} (a string or integer)"
    if isinstance(label, bool) or not isinstance(label, str | int) or label == "":
        return f"no {label_column!r} (a class name or integer)"
    return ""
