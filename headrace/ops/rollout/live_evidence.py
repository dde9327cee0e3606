"""Live evidence from ``control.rollout.live``: ``models compare`` (the stream's comparison of
two versions) and ``models promote --if-live-gate`` (promotion on it).

The topic holds one ``LiveCounts`` per (stream, model, production version, candidate version,
partition), compacted; the latest per key is that partition's running total, and the stream's
figures are their sum (``rollout.evidence.LiveEvidence``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from headrace.contracts import LiveCounts, ModelPublished, RolloutState
from headrace.contracts.gates import load_gates
from headrace.core.errors import PermanentError, ValidationFailed
from headrace.ops.rollout.control import current_rollout, stop_rollout
from headrace.rollout.evidence import LiveEvidence
from headrace.rollout.live_gate import LiveCheck, check_live
from headrace.store.versions import PRODUCTION, read_alias
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.compacted import read_latest
from headrace.streams.producing import EventSink
from headrace.streams.topics import ControlTopics
from headrace.trainers import promotion

Pair = tuple[str, str, int, int]  # stream, model, production version, candidate version


def latest_counts(conn: KafkaConnection, topic: str) -> dict[Pair, list[LiveCounts]]:
    """Every pair's latest counts, one per partition."""
    latest = read_latest(conn, topic, LiveCounts)
    pairs: dict[Pair, list[LiveCounts]] = {}
    for c in latest.values():
        pairs.setdefault((c.stream, c.model_name, c.production_version, c.candidate_version),
                         []).append(c)
    return pairs


def compare(conn: KafkaConnection, topics: ControlTopics, *, stream: str, name: str,
            a: int, b: int) -> LiveEvidence:
    """The stream's live comparison of ``name:a`` (as production) with ``name:b``."""
    pairs = latest_counts(conn, topics.rollout_live)
    if (stream, name, a, b) in pairs:
        return LiveEvidence.of(pairs[(stream, name, a, b)])
    if (stream, name, b, a) in pairs:
        return LiveEvidence.of(pairs[(stream, name, b, a)]).flipped()
    known = sorted(f"{m}:{p} vs {m}:{c}" for s, m, p, c in pairs if s == stream and m == name)
    raise PermanentError(f"no live counts for {name}:{a} vs {name}:{b} on stream {stream}"
                         + (f" (there are: {', '.join(known)})" if known else
                            " (run `headrace models shadow` or `models canary` first)"))


def all_evidence(conn: KafkaConnection, topics: ControlTopics) -> list[LiveEvidence]:
    """Every pair on every stream (the dashboard)."""
    return [LiveEvidence.of(c) for _, c in sorted(latest_counts(conn, topics.rollout_live)
                                                  .items())]


@dataclass
class LiveDecision:
    name: str
    version: int
    stream: str
    production_version: int
    checks: list[LiveCheck] = field(default_factory=list)
    event: ModelPublished | None = None

    @property
    def promoted(self) -> bool:
        return self.event is not None

    def reasons(self) -> list[str]:
        """One line per rule: ``held`` or ``FAILED``."""
        return [f"{'held' if c.held else 'FAILED'}: {c.rule}: {c.line}" for c in self.checks]


def _stream_of(pairs: dict[Pair, list[LiveCounts]], name: str, prod: int, version: int,
               stream: str | None) -> str:
    if stream is not None:
        return stream
    streams = sorted({s for s, m, p, c in pairs if (m, p, c) == (name, prod, version)})
    if len(streams) != 1:
        raise ValidationFailed(
            f"{name}:{version} has live counts against production v{prod} on "
            + (f"{len(streams)} streams ({', '.join(streams)}); name one with --stream"
               if streams else "no stream; run it as a shadow or canary first"))
    return streams[0]


def rollout_candidate(conn: KafkaConnection, topics: ControlTopics, *, stream: str,
                      name: str) -> RolloutState:
    """The stream's running shadow or canary of model ``name`` (what a scheduled live gate
    judges: it cannot know the version in advance)."""
    state = current_rollout(conn, stream, topics=topics)
    if state is None or state.candidate_version is None or state.model_name != name:
        raise ValidationFailed(f"stream {stream} runs no shadow or canary of model {name}")
    return state


def promote_if_live_gate(*, root: Path, conn: KafkaConnection, topics: ControlTopics, name: str,
                         version: int | None, stream: str | None = None) -> LiveDecision:
    """Promote ``name:version`` when its live gate holds against the current production;
    ``version`` None: the stream's rollout candidate. A promoted candidate's rollout ends."""
    rollout: RolloutState | None = None
    if version is None:
        if stream is None:
            raise ValidationFailed("name the version (NAME:VERSION) or the stream (--stream) "
                                   "whose rollout candidate the live gate judges")
        rollout = rollout_candidate(conn, topics, stream=stream, name=name)
        assert rollout.candidate_version is not None
        version = rollout.candidate_version
    gate = load_gates(root, name).live
    if gate is None:
        raise ValidationFailed(f"gates.yaml has no live rules for model {name} (add a `live:` "
                               "entry)")
    current = read_alias(root, name, PRODUCTION)
    if current is None:
        raise PermanentError(f"model {name} has no production version to compare against")
    if current.version == version:
        raise ValidationFailed(f"{name}:{version} is already production")
    pairs = latest_counts(conn, topics.rollout_live)
    s = _stream_of(pairs, name, current.version, version, stream)
    counts = pairs.get((s, name, current.version, version))
    if not counts:
        raise PermanentError(f"no live counts for {name}:{version} against production "
                             f"v{current.version} on stream {s}")
    decision = LiveDecision(name, version, s, current.version,
                            checks=check_live(gate, LiveEvidence.of(counts)))
    if all(c.held for c in decision.checks):
        ensure_topics(conn, topics.specs())
        sink = EventSink(conn)
        try:
            decision.event = promotion.promote(
                root=root, sink=sink, topic=topics.models, name=name, version=version,
                reason=f"live gate on {s}: " + "; ".join(c.line for c in decision.checks))
        finally:
            sink.close()
        running = rollout or current_rollout(conn, s, topics=topics)
        if (running is not None and running.model_name == name
                and running.candidate_version == version):
            stop_rollout(conn=conn, stream=s, model_name=name, topics=topics,
                         reason=f"{name}:{version} promoted by the live gate")
    return decision
