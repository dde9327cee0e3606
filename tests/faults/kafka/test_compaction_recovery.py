"""Compaction for real on the control topics a scorer and the ops commands recover from.

Which topics Apache Kafka compacts: every one Headrace creates as such (read back from the
brokers' topic configs). Then the rollout state (``control.rollout``), the live tally
(``control.rollout.live``) and the lineage index (``control.lineage``) are written as scorers
and ``models shadow|canary|stop`` write them (each key superseded many times), with a short
``segment.ms`` and a low ``min.cleanable.dirty.ratio``; once the log cleaner has removed the
superseded records, the readers that recover from them -- a scorer's ``RolloutWatch`` and
``LiveCountsFollower``, ``models compare``'s ``latest_counts``, the lineage index -- rebuild
exactly the state they read from the whole log before.
"""

from __future__ import annotations

import threading
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from headrace.contracts import (
    Canary,
    DriftWindowState,
    LineageRange,
    LiveCounts,
    RolloutRole,
    RolloutState,
)
from headrace.ops.lineage import read_index
from headrace.ops.rollout.control import current_rollout
from headrace.ops.rollout.live_evidence import latest_counts
from headrace.scorers.drift_tap import read_states
from headrace.scorers.rollout.live_counts import LiveCountsFollower, Pair
from headrace.scorers.rollout.state import RolloutWatch
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.producing import EventSink
from headrace.streams.reading import iter_records
from headrace.streams.topics import ControlTopics, TopicSpec
from headrace.trainers.control.app_config import ControlAppConfig, topic_specs
from tests.faults.harness import figures
from tests.faults.kafka.test_compaction import COMPACT_SOON
from tests.fixtures import eventually
from tools.kafka_cluster import KafkaCluster

pytestmark = [pytest.mark.slow, pytest.mark.kafka]
STREAMS = ("sa", "sb", "sc")
ROUNDS = 8
FILLER = "zzfiller"  # written last, so the real records' last segment is closed (cleanable)


def topic_configs(bootstrap: str, names: list[str]) -> dict[str, str]:
    """Each topic's ``cleanup.policy`` as the brokers hold it."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in names])
    return {res.name: f.result(30)["cleanup.policy"].value for res, f in futures.items()}


def test_every_topic_headrace_creates_compacted_is_compacted_on_kafka(
        kafka_cluster: KafkaCluster, conn: KafkaConnection) -> None:
    topics = ControlTopics.with_prefix("k" + uuid.uuid4().hex[:10])
    specs = topic_specs(ControlAppConfig(conn=conn, topics=topics))
    ensure_topics(conn, specs)
    policies = topic_configs(kafka_cluster.bootstrap, [s.name for s in specs])
    compacted = sorted(n.removeprefix(topics.prefix).lstrip(".-") for n, p in policies.items()
                       if p == "compact")
    figures("kafka_compacted_topics", compacted=",".join(compacted))
    assert compacted == sorted([
        "control.drift.state", "control.lineage", "control.rollout", "control.rollout.live",
        "events.drift", "events.schedules", "headrace-control-drift-episodes-changelog",
        "headrace-control-jobs-changelog", "headrace-control-rule-counters-changelog"])


def _history(topics: ControlTopics) -> list[list[tuple[str, Any]]]:
    """What scorers and operators write over a rollout's life: each stream's state moved on
    every round (shadow, a canary stepping up, stopped), each partition's counts growing
    (and sent again with the same offset and later labels, as a scorer's close does), each
    open lineage range re-published with every batch and closed by a new one."""
    rounds: list[list[tuple[str, Any]]] = []
    for r in range(ROUNDS):
        out: list[tuple[str, Any]] = []
        rounds.append(out)
        for i, s in enumerate(STREAMS):
            if i == 2 and r == ROUNDS - 1:
                st = RolloutState(stream=s, model_name="m", candidate_version=None,
                                  reason="stopped")
            elif i == 1:
                st = RolloutState(stream=s, model_name="m", candidate_version=2,
                                  role=RolloutRole.CANARY, reason=f"step {r}",
                                  canary=Canary(percent=5.0 * (r + 1), salt="x", steps=[50.0]))
            else:
                st = RolloutState(stream=s, model_name="m", candidate_version=r + 2,
                                  role=RolloutRole.SHADOW, reason=f"round {r}")
            out.append((topics.rollout, st))
            for p in range(2):
                n = 100 * (r + 1) + p
                counts = LiveCounts(
                    stream=s, model_name="m", production_version=1, candidate_version=2,
                    role=RolloutRole.SHADOW, partition=p, next_offset=n, classes=["no", "yes"],
                    rows=n, matrix=[[n - r, r], [0, 0]], labelled=r,
                    production_truth=[[r, 0], [0, 0]], candidate_truth=[[r, 0], [0, 0]])
                out.append((topics.rollout_live, counts))
                if r == ROUNDS - 1:  # a close sends the last counts again, labels joined since
                    out.append((topics.rollout_live, counts.model_copy(update={"labelled": r + 3})))
                # Each partition's open drift window, moved on with every batch; version 1's
                # state is dropped (a tombstone) once version 2 replaces it.
                if r < ROUNDS - 2:
                    out.append((topics.drift_state, DriftWindowState(
                        stream=s, model_name="m", model_version=1 if r < 3 else 2,
                        scope=f"p{p}", window=r // 2, rows=10 * r + p,
                        consecutive={"f": r // 2}, drifting={"f": r % 2 == 1})))
                if r == 3:
                    out.append((topics.drift_state, (f"{s}|m|1|p{p}", None)))
                first = 0 if r < ROUNDS // 2 else 400
                out.append((topics.lineage, LineageRange(
                    stream=s, topic=f"data.{s}", partition=p, model_name="m", version=1,
                    role=RolloutRole.PRODUCTION, first=first, last=n, records=n - first + 1)))
    return rounds


def _key(event: Any) -> bytes:
    return event[0].encode() if isinstance(event, tuple) else bytes(event.key())


def _filler(topics: ControlTopics) -> list[tuple[str, Any]]:
    return [
        (topics.rollout, RolloutState(stream=FILLER, model_name="m", reason="filler")),
        (topics.rollout_live, LiveCounts(
            stream=FILLER, model_name="m", production_version=1, candidate_version=2,
            role=RolloutRole.SHADOW, partition=0, next_offset=0, classes=["no", "yes"],
            matrix=[[0, 0], [0, 0]])),
        (topics.lineage, LineageRange(stream=FILLER, topic=f"data.{FILLER}", partition=0,
                                      model_name="m", version=1, role=RolloutRole.PRODUCTION,
                                      first=0, last=0)),
        (topics.drift_state, DriftWindowState(stream=FILLER, model_name="m", model_version=1,
                                              scope="p0", window=0, rows=0)),
    ]


def _tap_context(conn: KafkaConnection, topics: ControlTopics, stream: str) -> Any:
    """What ``drift_tap.read_states`` reads of a scorer's context."""
    return SimpleNamespace(conn=conn, settings=SimpleNamespace(topic_prefix=topics.prefix),
                           scorer=SimpleNamespace(stream=stream))


def recovered(conn: KafkaConnection, topics: ControlTopics) -> dict[str, Any]:
    """The state each recovering reader rebuilds from the topics as they are now."""
    stop = threading.Event()
    watches = {s: RolloutWatch(conn, topics.rollout, s).start(stop) for s in STREAMS}
    followers = {s: LiveCountsFollower(conn, topics.rollout_live, s).start(stop)
                 for s in STREAMS}
    try:
        for w in watches.values():
            assert w.wait_caught_up(30)
        for f in followers.values():
            assert f.wait_caught_up(30)
        pair = {s: Pair(s, "m", 1, 2) for s in STREAMS}
        return {
            "scorer rollout": {s: w.current for s, w in watches.items()},
            "ops rollout": {s: current_rollout(conn, s, topics=topics) for s in STREAMS},
            "scorer live counts": {s: followers[s].latest_for(pair[s]) for s in STREAMS},
            "ops live counts": {k: sorted(v, key=lambda c: c.partition)
                                for k, v in latest_counts(conn, topics.rollout_live).items()
                                if k[0] != FILLER},
            "lineage": sorted((r for r in read_index(conn, topics.lineage)
                               if r.stream != FILLER), key=lambda r: r.key()),
            "scorer drift state": {(s, p): read_states(_tap_context(conn, topics, s), f"p{p}")
                                   for s in STREAMS for p in range(2)},
        }
    finally:
        stop.set()


def test_rollout_state_live_tally_and_lineage_recover_the_same_from_a_compacted_log(
        kafka_cluster: KafkaCluster, conn: KafkaConnection) -> None:
    t0 = time.monotonic()
    topics = ControlTopics.with_prefix("r" + uuid.uuid4().hex[:10])
    soon = [topics.rollout, topics.rollout_live, topics.lineage, topics.drift_state]
    ensure_topics(conn, [TopicSpec(t, 1, "compacted soon", COMPACT_SOON) for t in soon])
    ensure_topics(conn, topics.specs())
    rounds = _history(topics)
    history = [each for r in rounds for each in r]
    sink = EventSink(conn)
    tombstones = make_producer(conn)
    try:
        for r in rounds:  # one round per segment (segment.ms 200)
            for topic, event in r:
                if isinstance(event, tuple):  # (key, None): a tombstone
                    tombstones.produce(topic, None, event[0].encode())
                else:
                    sink.send(topic, event, key=event.key().decode(), wait=False)
            sink.flush()
            assert tombstones.flush(30) == 0
            time.sleep(0.3)
        before = recovered(conn, topics)
        for topic, event in _filler(topics):
            sink.send(topic, event, key=event.key().decode())
    finally:
        sink.close()
    written = {t: sum(1 for topic, _ in history if topic == t) for t in soon}
    keys = {t: len({_key(e) for topic, e in history if topic == t}) for t in soon}
    t_clean = time.monotonic()

    def compacted() -> dict[str, int]:
        # Every superseded record removed: at most one record per key left (a tombstone may
        # outlive its delete.retention.ms until the next clean), the filler besides.
        now = {t: [r.key for r in iter_records(conn, t, idle_s=0.3)
                   if not (r.key or b"").startswith(FILLER.encode())] for t in soon}
        done = all(len(ks) == len(set(ks)) for ks in now.values())
        return {t: len(ks) for t, ks in now.items()} if done else {}

    kept = eventually(compacted, timeout_s=120, interval_s=1.0,
                      what="the log cleaner to leave one record per key")
    cleaned_s = time.monotonic() - t_clean
    after = recovered(conn, topics)
    figures("kafka_compaction_recovery",
            written=",".join(f"{t.split('.', 1)[1]}:{n}" for t, n in written.items()),
            keys=",".join(f"{t.split('.', 1)[1]}:{n}" for t, n in keys.items()),
            kept=",".join(f"{t.split('.', 1)[1]}:{n}" for t, n in kept.items()),
            cleaned_s=round(cleaned_s, 1), test_s=round(time.monotonic() - t0, 1))
    # One record a key; version 1's drift state keys may be gone with their tombstones.
    assert all(kept[t] == keys[t] for t in soon if t != topics.drift_state), (kept, keys)
    assert keys[topics.drift_state] - 2 * len(STREAMS) <= kept[topics.drift_state]
    # The state is not trivial: a shadow, a canary at its last step, a stopped stream.
    assert before["scorer rollout"]["sa"].candidate_version == ROUNDS + 1
    canary = before["scorer rollout"]["sb"].canary
    assert canary is not None and canary.percent == 5.0 * ROUNDS
    assert before["scorer rollout"]["sc"] is None and before["ops rollout"]["sc"] is not None
    assert before["scorer live counts"]["sa"][1].labelled == ROUNDS + 2
    assert len(before["lineage"]) == 2 * len(STREAMS) * 2
    drift = before["scorer drift state"][("sa", 1)]
    assert [(st.model_version, st.window, st.rows) for st in drift.values()] == [
        (2, (ROUNDS - 3) // 2, 10 * (ROUNDS - 3) + 1)]  # version 1's state tombstoned
    for what in before:
        assert after[what] == before[what], what
