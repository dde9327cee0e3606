"""Canaries on the real broker with real (tiny) Keras models: the predictions topic holds exactly
one prediction per record, its version exactly as the salted hash routes the key (also after a
scorer restart and as the percent rises); a broken candidate rolls back by itself within one
batch; steps advance by records and the last one promotes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.contracts import (
    JobEventKind,
    LineageRange,
    ModelAction,
    ModelPublished,
    RolloutState,
)
from headrace.core.settings import Settings
from headrace.ops.rollout.canary import start_canary
from headrace.ops.rollout.control import current_rollout, publish_rollout
from headrace.rollout import routing
from headrace.scorers.engine import taps
from headrace.scorers.engine.taps import Scored
from headrace.scorers.rollout import state as rollout_state
from headrace.scorers.rollout.canary_outcomes import audit_id
from headrace.store.manifest import Manifest
from headrace.store.versions import ModelVersion, publish, read_alias
from headrace.streams.clients import KafkaConnection
from headrace.streams.reading import read_events
from headrace.streams.topics import dlq_topic
from tests.fixtures import read_all
from tests.scorers.canary_helpers import (
    CONTROL,
    audit_events,
    is_canary,
    one_each,
    wait_predictions,
)
from tests.scorers.conftest import (
    CLASSES,
    FEATURES,
    eventually,
    http_get,
    publish_tf,
    ready_scorer,
    rows,
    send_json,
)


def publish_broken(root: Path, name: str, *, nan_when_a_positive: bool = False) -> ModelVersion:
    """A real Keras classifier that returns NaN: for every row (NaN weights), or for the rows
    whose feature ``a`` is positive (weights so large the logits overflow to inf)."""
    import keras

    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((len(FEATURES),)),
                              keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(len(CLASSES), activation="softmax")])
    (w1, b1), (w2, b2) = model.layers[0].get_weights(), model.layers[1].get_weights()
    if nan_when_a_positive:
        w1[:] = 0.0
        w1[0, :] = 1e30  # relu(a * 1e30): 0 for a <= 0, huge for a > 0
        w2[:] = 0.0
        w2[:, 0] = 1e30  # inf for a > 0; softmax(inf) is NaN
        b1[:] = 0.0
    else:
        w2[:] = np.nan
    model.layers[0].set_weights([w1, b1])
    model.layers[1].set_weights([w2, b2])
    manifest = Manifest(name=name, framework="tensorflow", task="classifier",
                        features=FEATURES, label="y", classes=CLASSES)
    return publish(root, manifest, lambda d: model.save(d / "model.keras"))






def _waves(preds: list[tuple[Any, dict]], waves: int) -> list[list[tuple[Any, dict]]]:
    """Predictions by wave of records, when every wave sent the same keys in the same order:
    a key always lands in the same partition, so each wave is the same slice of every
    partition's offsets."""
    per: dict[int, list[tuple[Any, dict]]] = {}
    for mp in preds:
        per.setdefault(mp[1]["source_partition"], []).append(mp)
    out: list[list[tuple[Any, dict]]] = [[] for _ in range(waves)]
    for items in per.values():
        items.sort(key=lambda mp: mp[1]["source_offset"])
        size = len(items) // waves
        for w in range(waves):
            out[w] += items[w * size:(w + 1) * size]
    return out


def test_predictions_follow_the_salted_routing_exactly_across_a_restart_and_a_rising_percent(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    v1 = publish_tf(dfs, stream, seed=1)
    v2 = publish_tf(dfs, stream, seed=2, alias=False)
    st = start_canary(conn=conn, topics=CONTROL, root=dfs, ref=f"{stream}:{v2.version}",
                      stream=stream, percent=30, min_records=1_000_000)
    assert st.canary is not None
    salt = st.canary.salt.encode()
    n = 1500

    def on_candidate(preds: list[tuple[Any, dict]], percent: float) -> set[bytes]:
        """The keys the candidate scored; every prediction's version and role header exactly
        as the routing decides."""
        chosen = set()
        for msg, p in preds:
            want = routing.to_candidate(msg.key, salt, percent)
            assert p["model_version"] == (v2.version if want else v1.version), p
            assert is_canary(msg) == want
            if want:
                chosen.add(msg.key)
        return chosen

    with ready_scorer(settings, conn):
        send_json(conn, data, rows(n, seed=1), key_prefix="user")
        at_30 = on_candidate(wait_predictions(conn, stream, n), 30)
        assert 0.25 < len(at_30) / n < 0.35
    with ready_scorer(settings, conn):  # a restarted scorer: the same keys, the same routing
        send_json(conn, data, rows(n, seed=2), key_prefix="user")
        again = _waves(wait_predictions(conn, stream, 2 * n), 2)[1]
        assert on_candidate(again, 30) == at_30
        with _applied(stream, 60.0) as applied:
            publish_rollout(conn, CONTROL, st.model_copy(update={
                "canary": st.canary.model_copy(update={"percent": 60.0})}))
            assert applied.wait(60), "the scorer never took the 60% state"
        send_json(conn, data, rows(n, seed=3), key_prefix="user")
        preds = wait_predictions(conn, stream, 3 * n)
    assert len(one_each(preds)) == 3 * n  # one prediction per record, none lost or doubled
    last = _waves(preds, 3)[2]
    assert {m.key for m, _ in last} == {f"user{i}".encode() for i in range(n)}
    at_60 = on_candidate(last, 60)
    assert at_30 < at_60, "a key left the candidate as the percent rose"
    assert read_all(conn, dlq_topic(stream)) == []


@contextmanager
def _applied(stream: str, percent: float) -> Iterator[threading.Event]:
    """Set once this process's scorer has taken the state routing ``percent`` of ``stream``'s
    keys (its watch polls the topic every 0.5 s): records sent after it are routed by it."""
    seen = threading.Event()
    original = rollout_state.RolloutWatch.apply

    def apply(self: rollout_state.RolloutWatch, state: RolloutState) -> None:
        original(self, state)
        if state.stream == stream and state.canary is not None \
                and state.canary.percent == percent:
            seen.set()

    rollout_state.RolloutWatch.apply = apply  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        rollout_state.RolloutWatch.apply = original  # type: ignore[method-assign]


@pytest.mark.parametrize("transactional", [False, True], ids=["at-least-once", "transactions"])
def test_a_candidate_returning_nan_rolls_back_by_itself_within_one_batch(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str,
        transactional: bool) -> None:
    v1 = publish_tf(dfs, stream, seed=1)
    bad = publish_broken(dfs, stream)
    st = start_canary(conn=conn, topics=CONTROL, root=dfs, ref=f"{stream}:{bad.version}",
                      stream=stream, percent=20, steps=[50, 100], min_records=10)
    send_json(conn, data, rows(3000, seed=4), key_prefix="c")  # waiting: full batches of 512
    with ready_scorer(settings, conn, transactional=transactional) as scorer:
        preds = wait_predictions(conn, stream, 3000)
        ended = eventually(lambda: (c := current_rollout(conn, stream, topics=CONTROL)) is not None
                           and c.candidate_version is None and c, what="the rollout's end")
        metrics = http_get(scorer.http_port, "/metrics")[1].decode()
    assert (f'headrace_scorer_canary_decisions_total{{stream="{stream}",verdict="rollback"}} 1.0'
            in metrics)
    assert f'headrace_scorer_canary_percent{{stream="{stream}"}} 0.0' in metrics
    by_source = one_each(preds)
    assert len(by_source) == 3000  # every record exactly one prediction, from production
    assert {p["model_version"] for p in by_source.values()} == {v1.version}
    assert not any(is_canary(m) for m, _ in preds)
    assert read_all(conn, dlq_topic(stream)) == []  # nothing dead-lettered for the candidate
    assert "rolled back" in ended.reason and "error rate" in ended.reason
    rollback = [e for e in read_events(conn, CONTROL.models, ModelPublished, idle_s=0.5)
                if e.model_name == stream]
    assert [(e.action, e.version, e.previous_version) for e in rollback] == [
        (ModelAction.ROLLBACK, v1.version, bad.version)]
    assert rollback[0].reason == ended.reason
    audit = audit_events(conn, audit_id(st))
    assert [e.kind for e in audit] == [JobEventKind.STARTED, JobEventKind.FAILED]
    # Within one batch: the candidate was given one batch's share (~20% of 512), no more.
    assert audit[-1].reason == ended.reason
    assert 0 < audit[-1].metrics["candidate_records"] <= 512
    assert audit[-1].metrics["candidate_errors"] == audit[-1].metrics["candidate_records"]
    pointer = read_alias(dfs, stream)
    assert pointer is not None and pointer.version == v1.version  # the alias never moved


class RoleTap:
    """Notes who scored each row the taps see: (partition, offset) -> (role, version)."""

    name = "roles"

    def __init__(self) -> None:
        self.seen: list[tuple[tuple[int, int], tuple[str | None, int]]] = []

    def after_scoring(self, scored: Scored) -> None:
        for m in scored.messages().tolist():
            self.seen.append(((int(scored.batch.partitions[m]), int(scored.batch.offsets[m])),
                              (scored.role.value if scored.role else None,
                               scored.model.version)))

    def close(self) -> None:
        pass


@pytest.fixture
def role_tap() -> Iterator[RoleTap]:
    tap = RoleTap()
    taps.register("roles", lambda ctx: tap)
    try:
        yield tap
    finally:
        taps.unregister("roles")


def test_rows_a_candidate_fails_are_scored_by_production_in_the_same_batch(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str,
        role_tap: RoleTap) -> None:
    v1 = publish_tf(dfs, stream, seed=1)
    half = publish_broken(dfs, stream, nan_when_a_positive=True)
    st = start_canary(conn=conn, topics=CONTROL, root=dfs, ref=f"{stream}:{half.version}",
                      stream=stream, percent=50, min_records=1_000_000,
                      max_error_rate_margin=1.0)
    assert st.canary is not None
    salt = st.canary.salt.encode()
    records = rows(1000, seed=5)
    with ready_scorer(settings, conn):
        send_json(conn, data, records, key_prefix="h")
        preds = wait_predictions(conn, stream, 1000)
    by_key = {m.key: (m, p) for m, p in preds}
    assert len(one_each(preds)) == len(by_key) == 1000
    assert read_all(conn, dlq_topic(stream)) == []
    served = {"canary": 0, "fallback": 0}
    for i, rec in enumerate(records):
        msg, p = by_key[f"h{i}".encode()]
        routed = routing.to_candidate(msg.key, salt, 50)
        if routed and rec["a"] <= 0:  # the candidate scores it
            assert p["model_version"] == half.version and is_canary(msg)
            assert all(np.isfinite(p["scores"]))
            served["canary"] += 1
        else:  # production's own, or the candidate returned NaN for it
            assert p["model_version"] == v1.version and not is_canary(msg)
            served["fallback"] += routed
    assert served["canary"] > 100 and served["fallback"] > 100, served
    # The taps saw each row once, with the role and version of the prediction it got.
    seen = dict(role_tap.seen)
    assert len(seen) == len(role_tap.seen) == 1000
    for src, p in one_each(preds).items():
        assert seen[src] == (("canary", half.version) if p["model_version"] == half.version
                             else (None, v1.version))
    # The lineage index: one run per partition and role, holding exactly that role's records.
    ranges: dict[bytes, LineageRange] = {}
    for r in read_events(conn, CONTROL.lineage, LineageRange, idle_s=0.5):
        if r.stream == stream:
            ranges[r.key()] = r
    runs = sorted((r.partition, r.role.value, r.version, r.records) for r in ranges.values())
    want: dict[tuple[int, str, int], int] = {}
    for (part, _), p in one_each(preds).items():
        role = "canary" if p["model_version"] == half.version else "production"
        want[(part, role, p["model_version"])] = want.get((part, role, p["model_version"]), 0) + 1
    assert runs == sorted((*k, n) for k, n in want.items())


def test_steps_advance_by_records_and_the_last_promotes(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    v1 = publish_tf(dfs, stream, seed=1)
    v2 = publish_tf(dfs, stream, seed=2, alias=False)
    st = start_canary(conn=conn, topics=CONTROL, root=dfs, ref=f"{stream}:{v2.version}",
                      stream=stream, percent=10, steps=[50, 100], min_records=150)
    with ready_scorer(settings, conn) as scorer:
        # ~100 candidate records at 10%: under min_records, the step holds.
        send_json(conn, data, rows(1000, seed=6), key_prefix="a")
        wait_predictions(conn, stream, 1000)
        state = current_rollout(conn, stream, topics=CONTROL)
        assert state is not None and state.canary is not None and state.canary.percent == 10
        # ~100 more: over 150, the canary steps to 50%; ~1000 at 50%: over 150, it promotes
        # (the audit trail below shows both).
        send_json(conn, data, rows(1000, seed=7), key_prefix="b")
        send_json(conn, data, rows(2000, seed=8), key_prefix="c")
        eventually(lambda: (c := current_rollout(conn, stream, topics=CONTROL)) is not None
                   and c.candidate_version is None, what="the canary's end")
        eventually(lambda: scorer.holder.current is not None
                   and scorer.holder.current.version == v2.version, what="v2 swapped in")
        send_json(conn, data, rows(500, seed=9), key_prefix="d")
        preds = wait_predictions(conn, stream, 4500)
    assert len(one_each(preds)) == 4500
    pointer = read_alias(dfs, stream)
    assert pointer is not None and pointer.version == v2.version and pointer.previous == v1.version
    published = [e for e in read_events(conn, CONTROL.models, ModelPublished, idle_s=0.5)
                 if e.model_name == stream]
    assert [(e.action, e.version, e.previous_version) for e in published] == [
        (ModelAction.PROMOTED, v2.version, v1.version)]
    audit = audit_events(conn, audit_id(st))
    assert [e.kind for e in audit] == [JobEventKind.STARTED, JobEventKind.PROGRESS,
                                       JobEventKind.SUCCEEDED]
    assert audit[1].metrics["percent"] == 10 and audit[1].metrics["candidate_records"] >= 150
    assert "advanced to 50%" in audit[1].message
    assert audit[2].reason is None and "canary promoted" in audit[2].message  # not "kept"
    assert audit[2].metrics["percent"] == 50
    assert audit[2].metrics["candidate_records"] - audit[1].metrics["candidate_records"] >= 150
    last = {p["model_version"] for p in one_each(preds).values() if p["key"].startswith("d")}
    assert last == {v2.version}  # promoted: production is the candidate now


def test_a_candidate_that_does_not_load_rolls_back_and_production_scores_everything(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    v1 = publish_tf(dfs, stream, seed=1)
    v2 = publish_tf(dfs, stream, seed=2, alias=False)
    start_canary(conn=conn, topics=CONTROL, root=dfs, ref=f"{stream}:{v2.version}",
                 stream=stream, percent=50)
    with open(v2.path / "model.keras", "r+b") as f:  # the file rots after the canary started
        f.seek(100)
        f.write(b"\x00corrupt\x00")
    with ready_scorer(settings, conn):
        send_json(conn, data, rows(300, seed=10), key_prefix="k")  # the first batch decides
        preds = wait_predictions(conn, stream, 300)
        ended = eventually(lambda: (c := current_rollout(conn, stream, topics=CONTROL)) is not None
                           and c.candidate_version is None and c, what="the rollout's end")
    assert "does not load" in ended.reason and "sha256" in ended.reason
    assert len(one_each(preds)) == 300
    assert {p["model_version"] for _, p in preds} == {v1.version}
