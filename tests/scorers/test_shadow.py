"""Shadow scoring on the real broker with real models: the candidate's predictions, the live
comparison against an offline recount, and production's immunity to a slow or crashing
candidate."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.core.settings import Settings
from headrace.models import load
from headrace.ops.rollout.control import start_shadow
from headrace.ops.rollout.live_evidence import compare
from headrace.scorers.engine.models import LoadedModel
from headrace.scorers.rollout import candidates
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.topics import (
    ControlTopics,
    TopicSpec,
    labels_topic,
    predictions_topic,
    shadow_topic,
)
from tests.scorers.conftest import (
    eventually,
    http_get,
    publish_tf,
    read_topic,
    ready_scorer,
    rows,
    send_json,
)
from tests.scorers.shadow_helpers import live_counts, matrix, offline_labels, summed


def _metric(port: int, name: str, **labels: str) -> float:
    text = http_get(port, "/metrics")[1].decode()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_shadow_predictions_and_live_matrix_equal_an_offline_recount(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    publish_tf(dfs, stream, seed=0)
    publish_tf(dfs, stream, seed=3, alias=False)
    topics = ControlTopics.of(settings)
    start_shadow(root=dfs, conn=conn, ref=f"{stream}:2", topics=topics)
    n = 1200
    send_json(conn, data, rows(n))
    with ready_scorer(settings, conn, batch_size=100, shadow_budget_ms=5000) as scorer:
        prod = read_topic(conn, predictions_topic(stream), expect=n)
        shadow = read_topic(conn, shadow_topic(stream), expect=n)
        eventually(lambda: summed(live_counts(conn, topics, stream))["rows"] == n,
                   what="live counts of every record")
        port = scorer.http_port
        assert _metric(port, "headrace_live_rows", candidate="2") == n
        agreement = _metric(port, "headrace_live_agreement", candidate="2")
    assert {json.loads(m.value())["model_version"] for m in prod} == {1}
    assert {json.loads(m.value())["model_version"] for m in shadow} == {2}
    assert sorted(m.key() for m in shadow) == sorted(m.key() for m in prod)
    got = summed(live_counts(conn, topics, stream))
    a = offline_labels(dfs, f"{stream}:1", conn, stream)
    b = offline_labels(dfs, f"{stream}:2", conn, stream)
    assert got["candidate_errors"] == 0
    assert got["matrix"] == matrix(got["classes"], a, b)
    agree = sum(a[k] == b[k] for k in a)
    assert 0 < agree < n, "the two versions must disagree somewhere for the test to bite"
    assert agreement == pytest.approx(agree / n)
    # The shadow's predictions are the candidate's, record by record.
    assert {m.key(): json.loads(m.value())["label"] for m in shadow} == b
    # What `headrace models compare` reads from the topic is the same.
    ev = compare(conn, topics, stream=stream, name=stream, a=1, b=2)
    assert ev.rows == n and ev.matrix.tolist() == got["matrix"]


def _candidate_loaded(port: int, ref: str) -> None:
    eventually(lambda: _metric(port, "headrace_rollout_candidate", role="shadow", candidate=ref,
                               state="loaded") == 1, what=f"{ref} loaded as the shadow")


def test_rows_scored_while_the_candidate_loads_are_counted_as_dropped_for_loading(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    publish_tf(dfs, stream, seed=0)
    publish_tf(dfs, stream, seed=3, alias=False)
    topics = ControlTopics.of(settings)
    ref = f"{stream}:2"
    release = threading.Event()
    real = candidates.load_ref

    def held(**kw: Any) -> LoadedModel:
        release.wait(60)
        return real(**kw)

    monkeypatch.setattr(candidates, "load_ref", held)
    half = 300
    with ready_scorer(settings, conn, batch_size=50, shadow_budget_ms=5000) as scorer:
        port = scorer.http_port
        start_shadow(root=dfs, conn=conn, ref=ref, topics=topics)
        eventually(lambda: _metric(port, "headrace_rollout_candidate", role="shadow",
                                   candidate=ref, state="loading") == 1,
                   what="the candidate loading")
        send_json(conn, data, rows(half))
        read_topic(conn, predictions_topic(stream), expect=half)
        loading = _metric(port, "headrace_shadow_dropped_rows_total", reason="loading")
        release.set()
        _candidate_loaded(port, ref)
        send_json(conn, data, rows(half, seed=2), start=half)
        prod = read_topic(conn, predictions_topic(stream), expect=2 * half)
        eventually(lambda: summed(live_counts(conn, topics, stream))["rows"] == half,
                   what="live counts of the records after the load")
        dropped = {r: _metric(port, "headrace_shadow_dropped_rows_total", reason=r)
                   for r in ("budget", "busy", "error", "loading")}
    assert len(prod) == 2 * half
    assert loading == half  # every row production scored while the candidate loaded
    assert dropped == {"budget": 0, "busy": 0, "error": 0, "loading": half}
    got = summed(live_counts(conn, topics, stream))
    assert got["rows"] == half and got["candidate_errors"] == 0
    shadow = read_topic(conn, shadow_topic(stream), expect=half)
    assert sorted(m.key() for m in shadow) == sorted(f"k{i}".encode()
                                                     for i in range(half, 2 * half))


def _wrapped(monkeypatch: pytest.MonkeyPatch, fn: Any) -> None:
    """The real candidate from the store, its model call replaced by ``fn(real_fn, x)``."""
    real = candidates.load_ref  # the rollout candidate's loader (the shadow's and canary's)

    def load(**kw: Any) -> LoadedModel:
        m = real(**kw)
        return dataclasses.replace(m, fn=lambda x: fn(m.fn, x))

    monkeypatch.setattr(candidates, "load_ref", load)


def _production_alone(settings: Settings, conn: KafkaConnection, dfs: Path, data: str,
                      stream: str, *, reasons: set[str]) -> None:
    """Production publishes every record once; the candidate's rows are all dropped (and
    counted) for the given reasons; production never waited for it beyond the budget."""
    publish_tf(dfs, stream, seed=0)
    publish_tf(dfs, stream, seed=3, alias=False)
    topics = ControlTopics.of(settings)
    start_shadow(root=dfs, conn=conn, ref=f"{stream}:2", topics=topics)
    n = 600
    with ready_scorer(settings, conn, batch_size=50) as scorer:
        # A scorer that read the rollout late scores production alone until it has the
        # candidate (counted as "loading"): these counts need every row to meet it.
        _candidate_loaded(scorer.http_port, f"{stream}:2")
        send_json(conn, data, rows(n))
        prod = read_topic(conn, predictions_topic(stream), expect=n)
        eventually(lambda: summed(live_counts(conn, topics, stream))["candidate_errors"] == n,
                   what="every candidate row counted as dropped")
        port = scorer.http_port
        waits = _metric(port, "headrace_shadow_wait_seconds_count")
        within = _metric(port, "headrace_shadow_wait_seconds_bucket", le="0.1")
        dropped = {r: _metric(port, "headrace_shadow_dropped_rows_total", reason=r)
                   for r in ("budget", "busy", "error")}
        tap_errors = _metric(port, "headrace_scorer_tap_errors_total")
    sources = [(json.loads(m.value())["source_partition"], json.loads(m.value())["source_offset"])
               for m in prod]
    assert len(sources) == len(set(sources)) == n
    assert waits > 0 and within == waits, "production waited for the candidate past 100 ms"
    assert sum(dropped.values()) == n and {r for r, v in dropped.items() if v} <= reasons
    assert tap_errors == 0
    got = summed(live_counts(conn, topics, stream))
    assert got["rows"] == 0 and got["candidate_errors"] == n
    assert read_topic(conn, shadow_topic(stream), expect=1, timeout_s=1) == []


def test_a_slow_candidate_is_dropped_at_its_budget_and_never_delays_production(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(real: Any, x: np.ndarray) -> np.ndarray:
        time.sleep(0.3)
        return np.asarray(real(x))

    _wrapped(monkeypatch, slow)
    _production_alone(settings, conn, dfs, data, stream, reasons={"budget", "busy"})


def test_a_crashing_candidate_never_fails_a_production_row(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(real: Any, x: np.ndarray) -> np.ndarray:
        raise RuntimeError("candidate exploded")

    _wrapped(monkeypatch, crash)
    _production_alone(settings, conn, dfs, data, stream, reasons={"error"})
    assert read_topic(conn, f"data.{stream}.dlq", expect=1, timeout_s=1) == []


def test_labels_join_both_versions_and_their_truth_matrices_equal_the_offline_ones(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    publish_tf(dfs, stream, seed=0)
    publish_tf(dfs, stream, seed=3, alias=False)
    topics = ControlTopics.of(settings)
    ensure_topics(conn, [TopicSpec(labels_topic(stream), 3, "labels")])
    start_shadow(root=dfs, conn=conn, ref=f"{stream}:2", topics=topics)
    n = 600
    records = rows(n)
    truth = {f"k{i}".encode(): "yes" if r["a"] + r["b"] > 0 else "no"
             for i, r in enumerate(records)}
    keys = list(truth)
    early, late = keys[:200], keys[200:450]  # labels before their records, and after

    def send_labels(which: list[bytes]) -> None:
        p = make_producer(conn)
        for k in which:
            p.produce(labels_topic(stream), json.dumps({"label": truth.get(k, "no")}).encode(),
                      k)
        assert p.flush(15) == 0

    send_labels(early)
    with ready_scorer(settings, conn, batch_size=100, shadow_budget_ms=5000) as scorer:
        _candidate_loaded(scorer.http_port, f"{stream}:2")
        send_json(conn, data, records)
        read_topic(conn, shadow_topic(stream), expect=n)
        send_labels(late)
        send_labels([b"nobody"])  # a label with no prediction: waits, never joins
        port = scorer.http_port
        eventually(lambda: _metric(port, "headrace_live_labelled") == 450,
                   what="450 labels joined")
        accuracy = {v: _metric(port, "headrace_live_accuracy", version=v)
                    for v in ("production", "candidate")}
    # Labels joined after the last batch are persisted when the scorer stops.
    got = summed(live_counts(conn, topics, stream))
    a = offline_labels(dfs, f"{stream}:1", conn, stream)
    b = offline_labels(dfs, f"{stream}:2", conn, stream)
    labelled = early + late
    assert got["labelled"] == 450
    assert got["production_truth"] == matrix(got["classes"], truth, a, labelled)
    assert got["candidate_truth"] == matrix(got["classes"], truth, b, labelled)
    assert accuracy["production"] == pytest.approx(
        sum(a[k] == truth[k] for k in labelled) / 450)
    assert accuracy["candidate"] == pytest.approx(
        sum(b[k] == truth[k] for k in labelled) / 450)
    assert got["production_truth"] != got["candidate_truth"]
    # McNemar's discordant pairs, which the live gate's better_than_production reads.
    assert got["only_production_right"] == sum(
        a[k] == truth[k] != b[k] for k in labelled)
    assert got["only_candidate_right"] == sum(
        b[k] == truth[k] != a[k] for k in labelled)
    assert got["only_production_right"] + got["only_candidate_right"] > 0


def test_a_candidate_on_a_subset_of_the_columns_is_sliced_and_one_on_other_columns_decoded(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    publish_tf(dfs, stream, seed=0, features=("a", "b", "c", "d", "e"))
    publish_tf(dfs, stream, seed=3, alias=False, features=("d", "a"))  # a subset, reordered
    publish_tf(dfs, stream, seed=4, alias=False, features=("a", "b", "f"))  # "f": not in prod
    topics = ControlTopics.of(settings)
    start_shadow(root=dfs, conn=conn, ref=f"{stream}:2", topics=topics)
    records = rows(300, features=("a", "b", "c", "d", "e", "f"))
    with ready_scorer(settings, conn, batch_size=100, shadow_budget_ms=5000) as scorer:
        _candidate_loaded(scorer.http_port, f"{stream}:2")
        send_json(conn, data, records)
        sliced = read_topic(conn, shadow_topic(stream), expect=300)
        assert _metric(scorer.http_port, "headrace_shadow_decoded_again_total") == 0
        start_shadow(root=dfs, conn=conn, ref=f"{stream}:3", topics=topics)
        _candidate_loaded(scorer.http_port, f"{stream}:3")
        assert _metric(scorer.http_port, "headrace_shadow_dropped_rows_total") == 0
        send_json(conn, data, records, key_prefix="x")
        eventually(lambda: _metric(scorer.http_port, "headrace_shadow_rows_total",
                                   candidate=f"{stream}:3") == 300, what="candidate 3's rows")
        assert _metric(scorer.http_port, "headrace_shadow_decoded_again_total") > 0
        both = read_topic(conn, shadow_topic(stream), expect=600)
    for version, msgs in ((2, sliced), (3, [m for m in both if m.key().startswith(b"x")])):
        offline = load(f"{stream}:{version}", dfs_root=dfs).predict(records)
        got = {m.key(): json.loads(m.value()) for m in msgs}
        assert len(got) == 300 and {p["model_version"] for p in got.values()} == {version}
        prefix = "k" if version == 2 else "x"
        assert [got[f"{prefix}{i}".encode()]["label"] for i in range(300)] == [
            p["label"] for p in offline]
