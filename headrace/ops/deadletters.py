"""Dead letters of a stream: list them grouped by reason, show them, redrive them.

A redrive re-produces a letter's original bytes to its source topic (same partition when it
still exists) with its original headers minus ``dlq.*``, plus ``redrive-id`` and
``redrive-dlq-offset``. A letter is never redriven twice.

The ledger of redriven letters is a DFS file, ``ops/dlq/<stream>/redriven.jsonl`` (append-only,
fsynced), written under an exclusive lock (``flock`` on ``ops/dlq/<stream>/.lock``) so two
operators cannot redrive the same letter at once. Each entry names the letter by DLQ
partition:offset *and* a fingerprint of its content, so a DLQ topic recreated from scratch (the
embedded broker keeps nothing across restarts) never matches the ledger of an older one.

Protocol, per redrive:

1. Under the lock, read every letter (to the verified end) and the ledger.
2. Resolve earlier claims left by a crash: a ``claimed`` entry whose record is found in the
   source topic (by its ``redrive-id``, scanning from the offset noted at claim time) counts as
   redriven; one that is not found was never sent and may be redriven again.
3. Refuse, writing nothing, if an explicitly named letter was already redriven.
4. Append ``claimed`` entries (fsync), produce, flush (every record acknowledged), then append
   ``done`` entries (fsync).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from headrace.core.errors import ValidationFailed
from headrace.core.naming import confined
from headrace.ops.provenance import REDRIVE_DLQ_OFFSET, REDRIVE_ID
from headrace.streams import dlq as dlqh
from headrace.streams.clients import KafkaConnection, partition_count
from headrace.streams.producing import BatchProducer
from headrace.streams.reading import Record, probe_ends, read_range, scan_headers
from headrace.streams.topics import dlq_topic

PREVIEW_BYTES = 512
# A dry run's verdicts begin with one of these (ops.rechecking writes them).
AGAIN, PASS, UNCHECKED = "would fail again", "would pass decode and validate", "not checked"


@dataclass(frozen=True)
class Letter:
    record: Record

    @property
    def ref(self) -> str:
        return f"{self.record.partition}:{self.record.offset}"

    def h(self, name: str) -> str | None:
        return self.record.header(name)

    @property
    def error_class(self) -> str:
        return self.h(dlqh.DLQ_ERROR_CLASS) or "unknown"

    @property
    def stage(self) -> str:
        return self.h(dlqh.DLQ_STAGE) or "unknown"

    @property
    def source(self) -> tuple[str | None, int | None, int | None]:
        part, off = self.h(dlqh.DLQ_PARTITION), self.h(dlqh.DLQ_OFFSET)
        return (self.h(dlqh.DLQ_TOPIC), _offset(part), _offset(off))

    @property
    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for name in (dlqh.DLQ_TOPIC, dlqh.DLQ_PARTITION, dlqh.DLQ_OFFSET, dlqh.DLQ_TIMESTAMP,
                     dlqh.DLQ_ROW):
            h.update((self.h(name) or "").encode() + b"\0")
        h.update(self.record.value or b"")
        return h.hexdigest()[:32]

    def to_json(self, *, preview: int = PREVIEW_BYTES) -> dict[str, Any]:
        value = self.record.value or b""
        text = value[:preview].decode("utf-8", "replace")
        return {
            "ref": self.ref, "partition": self.record.partition, "offset": self.record.offset,
            "timestamp_ms": self.record.timestamp_ms, "error_class": self.error_class,
            "stage": self.stage, "error_message": self.h(dlqh.DLQ_ERROR_MESSAGE) or "",
            "source_topic": self.source[0], "source_partition": self.source[1],
            "source_offset": self.source[2], "row": self.h(dlqh.DLQ_ROW),
            "key": (self.record.key or b"").decode("utf-8", "replace"),
            "headers": {k: v.decode("utf-8", "replace") for k, v in self.record.headers},
            "bytes": len(value), "preview": text, "truncated": len(value) > preview,
        }


def _offset(text: str | None) -> int | None:
    """A header's number; None for anything else (``"²".isdigit()`` is true, ``int`` fails)."""
    return int(text) if text and text.isdecimal() else None


def read_letters(conn: KafkaConnection, stream: str, *, timeout_s: float = 60.0) -> list[Letter]:
    topic = dlq_topic(stream)
    n = partition_count(conn, topic)
    if n is None:
        raise ValidationFailed(f"stream {stream} has no dead-letter topic {topic}")
    bounds = probe_ends(conn, topic, range(n))
    return [Letter(r) for r in read_range(conn, topic, bounds, timeout_s=timeout_s)]


def parse_ref(text: str) -> str:
    """``N`` (partition 0) or ``P:N`` to the canonical ``P:N``."""
    part, _, off = text.rpartition(":")
    part = part or "0"
    if not (part.isdecimal() and off.isdecimal()):
        raise ValidationFailed(f"bad dead-letter offset {text!r}: use N or PARTITION:N")
    return f"{int(part)}:{int(off)}"


# --- the ledger -----------------------------------------------------------------------------


@dataclass
class Ledger:
    path: Path
    entries: list[dict[str, Any]] = field(default_factory=list)

    def state(self, letter: Letter) -> dict[str, Any] | None:
        """The last entry for this letter (same ref *and* fingerprint), if any."""
        found = None
        fp = letter.fingerprint
        for e in self.entries:
            if e.get("letter") == letter.ref and e.get("fingerprint") == fp:
                found = e
        return found

    def redriven(self, letter: Letter) -> dict[str, Any] | None:
        e = self.state(letter)
        return e if e is not None and e.get("state") == "done" else None

    def append(self, entries: Sequence[dict[str, Any]]) -> None:
        if not entries:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            for e in entries:
                f.write(json.dumps(e, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.entries.extend(entries)


def ledger_dir(root: Path, stream: str) -> Path:
    return confined(root, "ops", "dlq", stream)


def load_ledger(root: Path, stream: str) -> Ledger:
    path = ledger_dir(root, stream) / "redriven.jsonl"
    entries = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                entries.append(json.loads(line))
    return Ledger(path, entries)


@contextlib.contextmanager
def _locked(root: Path, stream: str) -> Iterator[None]:
    d = ledger_dir(root, stream)
    d.mkdir(parents=True, exist_ok=True)
    with open(d / ".lock", "a") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValidationFailed(f"another redrive of stream {stream} is running") from None
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


# --- list / show ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    error_class: str
    stage: str
    count: int
    redriven: int
    first_ref: str
    sample_message: str  # the reason, as the group's first letter states it


_NUMBER = re.compile(r"\b\d+(?:\.\d+)?\b")


def reason_key(message: str) -> str:
    """A letter's reason with its standalone numbers (offsets, rows, values) blanked, so
    letters that failed for the same reason group together and different reasons do not."""
    return _NUMBER.sub("N", message.strip())[:200]


def summarize(letters: Sequence[Letter], ledger: Ledger | None = None) -> list[Group]:
    """Dead letters grouped by reason (error class, stage, message), biggest group first."""
    counts: Counter[tuple[str, str, str]] = Counter()
    done: Counter[tuple[str, str, str]] = Counter()
    first: dict[tuple[str, str, str], Letter] = {}
    for lt in letters:
        k = (lt.error_class, lt.stage, reason_key(lt.h(dlqh.DLQ_ERROR_MESSAGE) or ""))
        counts[k] += 1
        first.setdefault(k, lt)
        if ledger is not None and ledger.redriven(lt):
            done[k] += 1
    return [Group(k[0], k[1], n, done[k], first[k].ref,
                  (first[k].h(dlqh.DLQ_ERROR_MESSAGE) or "")[:200])
            for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def select(letters: Sequence[Letter], *, offsets: Sequence[str] = (),
           error_class: str | None = None, limit: int | None = None) -> list[Letter]:
    by_ref = {lt.ref: lt for lt in letters}
    if offsets:
        refs = [parse_ref(o) for o in offsets]
        missing = [r for r in refs if r not in by_ref]
        if missing:
            raise ValidationFailed(f"no dead letter at {', '.join(missing)}")
        chosen = [by_ref[r] for r in dict.fromkeys(refs)]
    else:
        chosen = list(letters)
    if error_class is not None:
        chosen = [lt for lt in chosen if lt.error_class == error_class]
    return chosen[:limit] if limit is not None else chosen


# --- redrive --------------------------------------------------------------------------------


@dataclass
class RedrivePlanItem:
    letters: list[Letter]  # letters that name the same source record (row-level letters)
    target: str
    partition: int | None


@dataclass
class RedriveResult:
    redrive_id: str
    items: list[RedrivePlanItem]
    skipped_already: list[str]
    dry_run: bool

    @property
    def letters(self) -> int:
        return sum(len(i.letters) for i in self.items)

    def lines(self, checks: dict[str, str] | None = None) -> list[str]:
        """What moved (or would); with ``checks`` (ref -> verdict, see ``ops.rechecking``),
        which of the letters would fail again."""
        verb = "would redrive" if self.dry_run else "redrove"
        out = [f"{self.redrive_id}: {verb} {self.letters} dead letters "
               f"as {len(self.items)} records"]
        for it in self.items:
            where = f"{it.target}[{it.partition}]" if it.partition is not None else it.target
            refs = ", ".join(lt.ref for lt in it.letters)
            out.append(f"  {refs} ({it.letters[0].error_class}) -> {where}")
            out += [f"    {lt.ref}: {checks[lt.ref]}" for lt in it.letters
                    if checks and lt.ref in checks]
        if checks:
            n = Counter(AGAIN if v.startswith(AGAIN) else PASS if v.startswith(PASS)
                        else UNCHECKED for v in checks.values())
            out.append(f"  {n[AGAIN]} of {len(checks)} would fail again, {n[PASS]} would pass "
                       f"decode and validate, {n[UNCHECKED]} not checked"
                       + (" (fix the producer or the model first)" if n[AGAIN] else ""))
        if self.skipped_already:
            out.append(f"  skipped {len(self.skipped_already)} already redriven: "
                       + ", ".join(self.skipped_already[:20]))
        return out


def redrive(
    conn: KafkaConnection,
    root: Path,
    stream: str,
    *,
    error_class: str | None = None,
    offsets: Sequence[str] = (),
    dry_run: bool = False,
    timeout_s: float = 60.0,
) -> RedriveResult:
    """Redrive the selected dead letters once each; see the module docstring."""
    with _locked(root, stream):
        letters = read_letters(conn, stream)  # step 1
        ledger = load_ledger(root, stream)
        _resolve_claims(conn, ledger, letters)  # step 2
        chosen = select(letters, offsets=offsets, error_class=error_class)
        if offsets:
            again = [lt for lt in chosen if ledger.redriven(lt)]
            if again:  # step 3
                e = ledger.redriven(again[0]) or {}
                raise ValidationFailed(
                    f"dead letter {again[0].ref} was already redriven by {e.get('redrive_id')} "
                    f"at {e.get('at')}; refusing to send it twice")
        skipped = [lt.ref for lt in chosen if ledger.redriven(lt)]
        todo = [lt for lt in chosen if not ledger.redriven(lt)]
        if not todo:
            what = f"of class {error_class} " if error_class else ""
            if skipped:
                raise ValidationFailed(f"all {len(skipped)} dead letters {what}of stream {stream} "
                                       "were already redriven; nothing to do")
            raise ValidationFailed(f"no dead letters {what}in stream {stream}")
        items = _plan_items(conn, todo)
        rid = f"redrive-{datetime.now(UTC):%Y%m%dt%H%M%S}-{uuid.uuid4().hex[:8]}"
        result = RedriveResult(rid, items, skipped, dry_run)
        if dry_run:
            return result
        _send(conn, ledger, rid, items, timeout_s=timeout_s)  # step 4
        return result


def _plan_items(conn: KafkaConnection, letters: Sequence[Letter]) -> list[RedrivePlanItem]:
    groups: dict[tuple[str, int | None, int | None, str], RedrivePlanItem] = {}
    counts: dict[str, int | None] = {}
    for lt in letters:
        topic, part, off = lt.source
        if not topic:
            raise ValidationFailed(f"dead letter {lt.ref} has no {dlqh.DLQ_TOPIC} header")
        if lt.h(dlqh.DLQ_TRUNCATED_FROM):
            raise ValidationFailed(
                f"dead letter {lt.ref} holds only the first {len(lt.record.value or b'')} of "
                f"{lt.h(dlqh.DLQ_TRUNCATED_FROM)} bytes; it cannot be redriven (re-send it from "
                "its source)")
        if topic not in counts:
            counts[topic] = partition_count(conn, topic)
        n = counts[topic]
        if n is None:
            raise ValidationFailed(f"dead letter {lt.ref}: source topic {topic} does not exist")
        partition = part if part is not None and part < n else None
        # Row-level letters of one Arrow message share the message: send it once.
        key = (topic, part, off, lt.fingerprint if off is None else "")
        if key in groups:
            groups[key].letters.append(lt)
        else:
            groups[key] = RedrivePlanItem([lt], topic, partition)
    return list(groups.values())


def _resolve_claims(conn: KafkaConnection, ledger: Ledger, letters: Sequence[Letter]) -> None:
    pending = [(lt, e) for lt in letters if (e := ledger.state(lt)) and e.get("state") == "claimed"]
    if not pending:
        return
    by_target: dict[str, dict[int, int]] = {}
    for _, e in pending:
        starts = by_target.setdefault(e["target"], {})
        p = e.get("partition")
        for part in ([p] if p is not None else range(partition_count(conn, e["target"]) or 0)):
            starts[part] = min(starts.get(part, e["scan_from"].get(str(part), 0)),
                               e["scan_from"].get(str(part), 0))
    sent: set[tuple[str, str]] = set()
    for target, starts in by_target.items():
        if partition_count(conn, target) is None:
            continue
        found = scan_headers(conn, target, starts, match={}, collect=REDRIVE_DLQ_OFFSET)
        for values in found.values():
            sent.update((target, r) for v in values for r in v.split(","))
    now = datetime.now(UTC).isoformat()
    ledger.append([{**e, "state": "done", "at": now, "resolved": "found after a crash"}
                   for lt, e in pending if (e["target"], lt.ref) in sent])


def _send(conn: KafkaConnection, ledger: Ledger, rid: str, items: Sequence[RedrivePlanItem],
          *, timeout_s: float) -> None:
    targets: dict[str, list[int]] = {}
    for it in items:
        if it.target not in targets:
            n = partition_count(conn, it.target) or 0
            targets[it.target] = list(range(n))
    ends = {t: {str(p): e for p, (_, e) in probe_ends(conn, t, parts).items()}
            for t, parts in targets.items()}
    now = datetime.now(UTC).isoformat()

    def entry(lt: Letter, it: RedrivePlanItem, state: str) -> dict[str, Any]:
        return {"letter": lt.ref, "fingerprint": lt.fingerprint, "state": state,
                "redrive_id": rid, "target": it.target, "partition": it.partition,
                "scan_from": ends[it.target], "error_class": lt.error_class, "at": now}

    ledger.append([entry(lt, it, "claimed") for it in items for lt in it.letters])
    producer = BatchProducer(conn)
    for it in items:
        first = it.letters[0]
        headers = [(k, v) for k, v in first.record.headers if not k.startswith("dlq.")
                   and k not in (REDRIVE_ID, REDRIVE_DLQ_OFFSET)]
        headers.append((REDRIVE_ID, rid.encode()))
        headers.append((REDRIVE_DLQ_OFFSET, ",".join(lt.ref for lt in it.letters).encode()))
        producer.produce(it.target, first.record.value, first.record.key, headers,
                         partition=-1 if it.partition is None else it.partition)
    producer.flush(timeout_s)
    now = datetime.now(UTC).isoformat()
    ledger.append([{**entry(lt, it, "done"), "at": now} for it in items for lt in it.letters])
