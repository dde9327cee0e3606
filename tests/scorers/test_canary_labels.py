"""Labels in a canary, on the real broker with real (tiny) Keras models: a candidate that is
worse only on labels (trained on flipped truth: valid outputs, no errors) is rolled back by the
accuracy rule; a candidate as good as production advances only once it has ``min_labelled``
labelled records; each arm's persisted truth matrix equals an offline recount of the labels
topic against the predictions each version published."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from headrace.contracts import (
    JobEventKind,
    LiveCounts,
    ModelAction,
    ModelPublished,
    RolloutRole,
    parse,
)
from headrace.core.settings import Settings
from headrace.ops.rollout.canary import start_canary
from headrace.ops.rollout.control import current_rollout
from headrace.rollout import routing
from headrace.scorers.rollout.canary_outcomes import audit_id
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.reading import read_events
from headrace.streams.topics import TopicSpec, dlq_topic, labels_topic
from tests.fixtures import read_all
from tests.rollout.live_models import publish_version, truth_of
from tests.scorers.canary_helpers import (
    CONTROL,
    audit_events,
    is_canary,
    one_each,
    wait_predictions,
)
from tests.scorers.conftest import CLASSES, eventually, http_get, ready_scorer, rows, send_json


def _labelled(port: int, stream: str) -> dict[str, tuple[int, int]]:
    """Per arm, (labelled, correct) as the scorer's /metrics says."""
    text = http_get(port, "/metrics")[1].decode()
    out: dict[str, list[int]] = {"production": [0, 0], "candidate": [0, 0]}
    for line in text.splitlines():
        for i, name in enumerate(("headrace_scorer_canary_labelled{",
                                  "headrace_scorer_canary_labelled_correct{")):
            if line.startswith(name) and f'stream="{stream}"' in line:
                arm = "candidate" if 'arm="candidate"' in line else "production"
                out[arm][i] = int(float(line.rsplit(" ", 1)[1]))
    return {k: (v[0], v[1]) for k, v in out.items()}


def _joined(port: int, stream: str, n: int) -> None:
    """Wait until the scorer's canary has joined ``n`` labels (both arms)."""
    eventually(lambda: sum(x for x, _ in _labelled(port, stream).values()) == n,
               what=f"{n} labels joined")


def _send_labels(conn: KafkaConnection, stream: str, labels: dict[bytes, str]) -> None:
    p = make_producer(conn)
    for key, truth in labels.items():
        p.produce(labels_topic(stream), json.dumps({"label": truth}).encode(), key)
    assert p.flush(15) == 0


def _persisted(conn: KafkaConnection, stream: str) -> dict[str, Any]:
    """The canary's latest LiveCounts per partition, summed."""
    latest: dict[bytes, LiveCounts] = {}
    for rec in read_all(conn, CONTROL.rollout_live):
        if rec.value and (rec.key or b"").startswith(f"{stream}|".encode()):
            lc = parse(LiveCounts, rec.value)
            assert lc.role == RolloutRole.CANARY and rec.key == lc.key()
            old = latest.get(lc.key())
            if old is None or lc.next_offset >= old.next_offset:
                latest[lc.key()] = lc
    k = len(CLASSES)
    prod, cand = np.zeros((k, k), np.int64), np.zeros((k, k), np.int64)
    for lc in latest.values():
        assert lc.rows == 0 and not np.any(lc.matrix)  # nothing paired in a canary
        prod += np.asarray(lc.production_truth, np.int64)
        cand += np.asarray(lc.candidate_truth, np.int64)
    return {"production_truth": prod.tolist(), "candidate_truth": cand.tolist(),
            "labelled": sum(lc.labelled for lc in latest.values())}


def _recount(conn: KafkaConnection, stream: str, preds: list[tuple[Any, dict]],
             candidate: int) -> dict[str, Any]:
    """Offline: every label on the labels topic against the one prediction of its key, by the
    version that published it."""
    by_key = {m.key: p for m, p in preds}
    k = len(CLASSES)
    prod, cand = np.zeros((k, k), np.int64), np.zeros((k, k), np.int64)
    n = 0
    for rec in read_all(conn, labels_topic(stream)):
        p = by_key[rec.key]
        t, got = CLASSES.index(json.loads(rec.value or b"")["label"]), CLASSES.index(p["label"])
        (cand if p["model_version"] == candidate else prod)[t, got] += 1
        n += 1
    return {"production_truth": prod.tolist(), "candidate_truth": cand.tolist(), "labelled": n}


def test_a_candidate_worse_only_on_labels_is_rolled_back_by_the_accuracy_rule(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    good = publish_version(dfs, stream, train="truth", seed=11, alias=True)
    worse = publish_version(dfs, stream, train="flipped", seed=12)
    ensure_topics(conn, [TopicSpec(labels_topic(stream), 3, "labels")])
    st = start_canary(conn=conn, topics=CONTROL, root=dfs, ref=f"{stream}:{worse.version}",
                      stream=stream, percent=30, steps=[100], min_records=1_000_000,
                      max_accuracy_drop=0.1)
    first = rows(600, seed=21)
    with ready_scorer(settings, conn) as scorer:
        send_json(conn, data, first, key_prefix="a")
        wait_predictions(conn, stream, 600)
        # Without labels the candidate looks fine: no errors, the canary holds.
        state = current_rollout(conn, stream, topics=CONTROL)
        assert state is not None and state.candidate_version == worse.version
        _send_labels(conn, stream, {f"a{i}".encode(): truth_of(r) for i, r in enumerate(first)})
        _joined(scorer.http_port, stream, 600)
        # The next batch judges on them.
        send_json(conn, data, rows(200, seed=22), key_prefix="b")
        ended = eventually(lambda: (c := current_rollout(conn, stream, topics=CONTROL))
                           is not None and c.candidate_version is None and c,
                           what="the rollout's end")
        preds = wait_predictions(conn, stream, 800)
        arms = _labelled(scorer.http_port, stream)
    assert "rolled back" in ended.reason and "live accuracy" in ended.reason
    assert "error rate" not in ended.reason
    by_source = one_each(preds)
    assert len(by_source) == 800
    assert read_all(conn, dlq_topic(stream)) == []
    salt = st.canary.salt.encode() if st.canary else b""
    for msg, p in preds:  # wave a as routed; wave b (the rollback's batch on) production only
        routed = msg.key.startswith(b"a") and routing.to_candidate(msg.key, salt, 30)
        assert p["model_version"] == (worse.version if routed else good.version)
        assert is_canary(msg) == routed
    rollback = [e for e in read_events(conn, CONTROL.models, ModelPublished, idle_s=0.5)
                if e.model_name == stream]
    assert [(e.action, e.version, e.previous_version, e.reason) for e in rollback] == [
        (ModelAction.ROLLBACK, good.version, worse.version, ended.reason)]
    audit = audit_events(conn, audit_id(st))
    assert [e.kind for e in audit] == [JobEventKind.STARTED, JobEventKind.FAILED]
    assert audit[-1].reason == ended.reason and audit[-1].metrics["candidate_errors"] == 0
    # The counts the decision used equal an offline recount, persisted and on /metrics.
    offline = _recount(conn, stream, preds, worse.version)
    assert _persisted(conn, stream) == offline
    pt, ct = np.asarray(offline["production_truth"]), np.asarray(offline["candidate_truth"])
    assert arms == {"production": (int(pt.sum()), int(np.trace(pt))),
                    "candidate": (int(ct.sum()), int(np.trace(ct)))}
    assert audit[-1].metrics["candidate_labelled"] == ct.sum() > 100
    assert np.trace(ct) / ct.sum() < 0.2 and np.trace(pt) / pt.sum() > 0.9


def test_an_equal_candidate_advances_only_after_min_labelled_labelled_records(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    publish_version(dfs, stream, train="truth", seed=11, alias=True)
    equal = publish_version(dfs, stream, train="truth", seed=13)
    ensure_topics(conn, [TopicSpec(labels_topic(stream), 3, "labels")])
    st = start_canary(conn=conn, topics=CONTROL, root=dfs, ref=f"{stream}:{equal.version}",
                      stream=stream, percent=20, steps=[50], min_records=50, min_labelled=60,
                      max_accuracy_drop=0.1)
    assert st.canary is not None
    salt = st.canary.salt.encode()
    first = rows(1000, seed=31)
    truth = {f"a{i}".encode(): truth_of(r) for i, r in enumerate(first)}
    on_cand = [k for k in truth if routing.to_candidate(k, salt, 20)]
    on_prod = [k for k in truth if not routing.to_candidate(k, salt, 20)]

    def percent() -> float | None:
        c = current_rollout(conn, stream, topics=CONTROL)
        return c.canary.percent if c is not None and c.canary is not None else None

    with ready_scorer(settings, conn) as scorer:
        def joined(n: int) -> None:
            _joined(scorer.http_port, stream, n)

        send_json(conn, data, first, key_prefix="a")
        wait_predictions(conn, stream, 1000)  # ~200 candidate records: over min_records
        assert percent() == 20  # no labels: holds
        _send_labels(conn, stream, {k: truth[k] for k in on_cand[:59] + on_prod[:100]})
        joined(159)
        send_json(conn, data, rows(100, seed=32), key_prefix="b")
        wait_predictions(conn, stream, 1100)  # judged with 59 labelled candidate records
        assert percent() == 20
        _send_labels(conn, stream, {k: truth[k] for k in on_cand[59:60] + on_prod[100:110]})
        joined(170)
        send_json(conn, data, rows(100, seed=33), key_prefix="c")
        eventually(lambda: percent() == 50, what="the step to 50%")
        preds = wait_predictions(conn, stream, 1200)
        arms = _labelled(scorer.http_port, stream)
    assert len(one_each(preds)) == 1200
    audit = audit_events(conn, audit_id(st))
    assert [e.kind for e in audit] == [JobEventKind.STARTED, JobEventKind.PROGRESS]
    assert "advanced to 50%" in audit[1].message
    assert audit[1].metrics["candidate_labelled"] == 60
    assert audit[1].metrics["production_labelled"] == 110
    offline = _recount(conn, stream, preds, equal.version)
    assert _persisted(conn, stream) == offline
    assert np.asarray(offline["candidate_truth"]).sum() == arms["candidate"][0] == 60
    assert np.asarray(offline["production_truth"]).sum() == arms["production"][0] == 110


def test_a_restarted_scorer_reads_the_canarys_label_counts_back_and_adds_to_them(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    publish_version(dfs, stream, train="truth", seed=11, alias=True)
    cand = publish_version(dfs, stream, train="flipped", seed=12)
    ensure_topics(conn, [TopicSpec(labels_topic(stream), 3, "labels")])
    start_canary(conn=conn, topics=CONTROL, root=dfs, ref=f"{stream}:{cand.version}",
                 stream=stream, percent=50, min_records=1_000_000)  # no accuracy rule
    for wave, prefix in enumerate(("a", "b")):
        records = rows(300, seed=41 + wave)
        with ready_scorer(settings, conn) as scorer:
            send_json(conn, data, records, key_prefix=prefix)
            wait_predictions(conn, stream, 300 * (wave + 1))
            _send_labels(conn, stream, {f"{prefix}{i}".encode(): truth_of(r)
                                        for i, r in enumerate(records)})
            # The second scorer starts from the first one's counts.
            _joined(scorer.http_port, stream, 300 * (wave + 1))
        # Joined after the scorer's last batch: persisted when it stopped.
        preds = wait_predictions(conn, stream, 300 * (wave + 1))
        assert _persisted(conn, stream) == _recount(conn, stream, preds, cand.version)
    assert _persisted(conn, stream)["labelled"] == 600
