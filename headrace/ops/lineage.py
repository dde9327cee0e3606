"""Lineage: from a prediction back to what made it, and from a model version forward to what it
scored.

Backward (``trace``): the prediction record -> its input record (source topic, partition,
offset) -> the model version and role -> the version's manifest (training job, dataset
fingerprint) -> the job's ``request.json`` on the DFS (the TrainRequested that started it).
The role: ``shadow`` on a ``.shadow`` predictions topic; else the lineage index says whether
the version scored that offset as a canary; else production.

Forward (``scored_ranges``): the offset ranges a version scored, read from the lineage index
(``control.lineage``, compacted, written by the scorer's lineage tap): the index topic only,
never the data or predictions topics.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headrace.contracts import LineageRange, Prediction, RolloutRole, parse
from headrace.core import bounded_json
from headrace.core.errors import PermanentError, ValidationFailed
from headrace.store import versions
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection, partition_count
from headrace.streams.codecs import decode_arrow
from headrace.streams.compacted import read_latest
from headrace.streams.reading import Record, probe_ends, read_one, read_range
from headrace.streams.topics import ControlTopics, predictions_topic
from headrace.trainers.jobs import read_request

SHADOW_SUFFIX = ".shadow"
KEY_SCAN_STEP = 5000  # records read per partition per step when looking for a key


@dataclass(frozen=True)
class Where:
    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition}:{self.offset}"


def parse_where(text: str) -> Where:
    """``TOPIC:PARTITION:OFFSET`` (the topic may hold dots, never a colon)."""
    topic, _, rest = text.rpartition(":")
    topic, _, part = topic.rpartition(":")
    if not topic or not part.isdecimal() or not rest.isdecimal():
        raise ValidationFailed(f"expected TOPIC:PARTITION:OFFSET, not {text!r}")
    return Where(topic, int(part), int(rest))


# --- the index ---------------------------------------------------------------------------


def read_index(conn: KafkaConnection, topic: str,
               keep: Callable[[list[bytes]], bool] | None = None) -> list[LineageRange]:
    """The index's ranges (the latest record per key, as compaction would keep); ``keep``
    chooses by the key's fields (stream, partition, first, model, version, role) so only the
    wanted records are parsed."""
    def chosen(key: bytes) -> bool:
        return keep is None or keep(key.split(b"|"))

    return list(read_latest(conn, topic, LineageRange, keep=chosen).values())


def merged(ranges: list[LineageRange]) -> list[LineageRange]:
    """Sorted by (stream, topic, partition, first); ranges of one version and role that touch
    or overlap (a restart resumed where the last one ended) become one."""
    out: list[LineageRange] = []
    for r in sorted(ranges, key=lambda r: (r.stream, r.topic, r.partition, r.model_name,
                                           r.version, r.role.value, r.first)):
        prev = out[-1] if out else None
        if (prev is not None and (prev.stream, prev.topic, prev.partition, prev.model_name,
                                  prev.version, prev.role) ==
                (r.stream, r.topic, r.partition, r.model_name, r.version, r.role)
                and r.first <= prev.last + 1):
            out[-1] = prev.model_copy(update={"last": max(prev.last, r.last),
                                              "records": prev.records + r.records})
        else:
            out.append(r)
    return sorted(out, key=lambda r: (r.stream, r.topic, r.partition, r.first, r.role.value))


def scored_ranges(conn: KafkaConnection, topics: ControlTopics, name: str, version: int, *,
                  stream: str | None = None, role: RolloutRole | None = None
                  ) -> list[LineageRange]:
    """The offset ranges ``name:version`` scored (in ``role``, else every role), from the
    index."""
    m, v = name.encode(), str(version).encode()
    st = stream.encode() if stream else None
    ro = role.value.encode() if role else None

    def keep(key: list[bytes]) -> bool:  # stream|partition|first|model|version|role
        return (len(key) == 6 and key[3] == m and key[4] == v
                and (st is None or key[0] == st) and (ro is None or key[5] == ro))

    return merged(read_index(conn, topics.lineage, keep))


def replay_command(r: LineageRange, name: str, version: int) -> str:
    """The ``headrace replay`` line that re-scores ``r`` with ``name:version`` into a side
    topic (e.g. what a rolled-back canary scored, with the version it rolled back to)."""
    return (f"headrace replay {r.topic} --partition {r.partition} --from-offset {r.first} "
            f"--to-offset {r.last + 1} --model {name}:{version} "
            f"--into {r.topic}.rescored-v{version}")


def parse_version_ref(ref: str) -> tuple[str, int] | None:
    """``NAME:VERSION`` -> (name, version); None when ``ref`` is not one (a prediction)."""
    name, sep, ver = ref.partition(":")
    if sep and ver.isdecimal() and ":" not in name and name:
        return name, int(ver)
    return None


# --- backward ----------------------------------------------------------------------------


@dataclass
class Trace:
    """Where one prediction came from; ``as_dict`` for --json."""

    prediction: Where
    key: str | None
    source: Where
    source_value: Any
    model_name: str
    version: int
    role: RolloutRole
    job_id: str | None = None
    dataset: dict[str, Any] | None = None
    trigger_event_id: str | None = None
    code_version: str = ""
    train_requested: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"prediction": str(self.prediction), "key": self.key,
                "source": str(self.source), "source_value": self.source_value,
                "model": f"{self.model_name}:{self.version}", "role": self.role.value,
                "job_id": self.job_id, "dataset": self.dataset,
                "trigger_event_id": self.trigger_event_id, "code_version": self.code_version,
                "train_requested": self.train_requested, "notes": self.notes}


def _prediction_of(rec: Record) -> tuple[str, int, int, str, int, str | None]:
    """(source topic, partition, offset, model, version, key) of a prediction record."""
    if rec.header(hdr.CONTENT_TYPE) == hdr.ARROW:
        try:
            row = decode_arrow(rec.value or b"").slice(0, 1).to_pylist()
            if not row:
                raise ValueError("an empty batch")
            r = row[0]
            return (str(r["source_topic"]), int(r["source_partition"]),
                    int(r["source_offset"]), str(r["model_name"]), int(r["model_version"]),
                    None if r.get("key") is None else str(r["key"]))
        except Exception as exc:  # any bytes may come labelled Arrow
            why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise PermanentError(f"{rec.topic}:{rec.partition}:{rec.offset} is not a "
                                 f"prediction: {why}") from None
    try:
        p = parse(Prediction, rec.value or b"")
    except ValidationFailed as exc:
        raise PermanentError(f"{rec.topic}:{rec.partition}:{rec.offset} is not a prediction: "
                             f"{exc}") from None
    return (p.source_topic, p.source_partition, p.source_offset, p.model_name,
            p.model_version, p.key)


def _value(rec: Record | None) -> Any:
    if rec is None or rec.value is None:
        return None
    if rec.header(hdr.CONTENT_TYPE) == hdr.ARROW:
        return f"<Arrow batch, {len(rec.value)} bytes>"
    try:
        return bounded_json.loads(rec.value)
    except ValidationFailed:
        return f"<{len(rec.value)} bytes>"


def trace(conn: KafkaConnection, root: Path, topics: ControlTopics, where: Where,
          *, index: list[LineageRange] | None = None) -> Trace:
    """Walk back from the prediction at ``where``."""
    rec = read_one(conn, where.topic, where.partition, where.offset)
    if rec is None:
        raise PermanentError(f"no record at {where}")
    src_topic, src_part, src_off, name, version, key = _prediction_of(rec)
    source = Where(src_topic, src_part, src_off)
    src = read_one(conn, src_topic, src_part, src_off)
    t = Trace(prediction=where, key=key, source=source, source_value=_value(src),
              model_name=name, version=version, role=RolloutRole.PRODUCTION)
    if src is None:
        t.notes.append(f"input record {source} is gone (retention or compaction)")
    t.role = _role(conn, topics, where.topic, t, index)
    try:
        mv = versions.load_version(root, name, version, verify=False)
    except PermanentError as exc:
        t.notes.append(f"model version: {exc}")
        return t
    m = mv.manifest
    t.job_id, t.trigger_event_id, t.code_version = m.job_id, m.trigger_event_id, m.code_version
    t.dataset = m.dataset.model_dump() if m.dataset else None
    if m.job_id:
        try:
            t.train_requested = json.loads(read_request(root, m.job_id).model_dump_json())
        except (OSError, PermanentError, ValueError) as exc:
            t.notes.append(f"job {m.job_id}: no TrainRequested ({exc})")
    else:
        t.notes.append(f"{name}:{version} was not made by a training job (no job id)")
    return t


def _role(conn: KafkaConnection, topics: ControlTopics, prediction_topic: str, t: Trace,
          index: list[LineageRange] | None) -> RolloutRole:
    if prediction_topic.endswith(SHADOW_SUFFIX):
        return RolloutRole.SHADOW
    ranges = index if index is not None else read_index(conn, topics.lineage)
    roles = {r.role for r in ranges
             if r.model_name == t.model_name and r.version == t.version
             and r.topic == t.source.topic and r.partition == t.source.partition
             and r.holds(t.source.offset) and r.role != RolloutRole.SHADOW}
    if roles == {RolloutRole.CANARY}:
        return RolloutRole.CANARY
    if not roles:
        t.notes.append("the lineage index has no range for this record; role assumed")
    return RolloutRole.PRODUCTION


def latest_for_key(conn: KafkaConnection, stream: str, key: str) -> list[Where]:
    """The latest prediction of ``key`` on ``predictions.<stream>`` in each partition that has
    one, newest first, scanning each partition back from its end."""
    topic = predictions_topic(stream)
    n = partition_count(conn, topic)
    if n is None:
        raise PermanentError(f"topic {topic} does not exist")
    want = key.encode()
    found: list[tuple[int, Where]] = []
    for p, (lo, end) in probe_ends(conn, topic, range(n)).items():
        hi = end
        while hi > lo:
            start = max(lo, hi - KEY_SCAN_STEP)
            hits = [r for r in read_range(conn, topic, {p: (start, hi)}) if r.key == want]
            if hits:
                best = max(hits, key=lambda r: r.offset)
                found.append((best.timestamp_ms or 0, Where(topic, p, best.offset)))
                break
            hi = start
    if not found:
        raise PermanentError(f"no prediction for key {key!r} on {topic}")
    return [w for _, w in sorted(found, key=lambda f: -f[0])]
