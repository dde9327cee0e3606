from __future__ import annotations

import logging
from pathlib import Path

import pytest

from headrace.contracts import ModelAction, ModelPublished
from headrace.core.settings import Settings
from headrace.store.versions import set_alias
from headrace.streams.clients import KafkaConnection
from headrace.streams.producing import send_events
from headrace.streams.topics import MODEL_EVENTS, predictions_topic
from tests.scorers.conftest import (
    eventually,
    http_get,
    predictions,
    publish_tf,
    read_topic,
    ready_scorer,
    rows,
    send_json,
)


def _announce(conn: KafkaConnection, name: str, mv: object, *, previous: int | None = None,
              action: ModelAction = ModelAction.PROMOTED) -> None:
    send_events(conn, MODEL_EVENTS, [ModelPublished(
        model_name=name, version=mv.version, framework="tensorflow",  # type: ignore[attr-defined]
        task="classifier", path=str(mv.path), manifest_sha256=mv.manifest_sha256,  # type: ignore[attr-defined]
        previous_version=previous, action=action)])


def test_model_swap_mid_stream_loses_nothing_and_versions_switch(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    v1 = publish_tf(dfs, stream, seed=1)
    with ready_scorer(settings, conn) as scorer:
        send_json(conn, data, rows(1000, seed=1), key_prefix="a")
        read_topic(conn, predictions_topic(stream), expect=1000, settle_s=0)
        v2 = publish_tf(dfs, stream, seed=2)  # moves the production alias
        _announce(conn, stream, v2, previous=v1.version)
        eventually(lambda: scorer.holder.current is not None
                 and scorer.holder.current.version == v2.version, what="swap to v2")
        send_json(conn, data, rows(1000, seed=2), key_prefix="b")
        read_topic(conn, predictions_topic(stream), expect=2000, settle_s=0)
        # Rollback is a swap too (the alias pointer moves back; found by polling or event).
        set_alias(dfs, stream, v1.version, reason="rollback")
        _announce(conn, stream, v1, previous=v2.version, action=ModelAction.ROLLBACK)
        eventually(lambda: scorer.holder.current is not None
                 and scorer.holder.current.version == v1.version, what="rollback to v1")
        send_json(conn, data, rows(500, seed=3), key_prefix="c")
        msgs = read_topic(conn, predictions_topic(stream), expect=2500)
        _, metrics = http_get(scorer.http_port, "/metrics")
    preds = predictions(msgs)
    assert len(preds) == 2500
    by_prefix: dict[str, set[int]] = {}
    for p in preds:
        by_prefix.setdefault(p["key"][0], set()).add(p["model_version"])
    assert by_prefix == {"a": {v1.version}, "b": {v2.version}, "c": {v1.version}}
    assert b"headrace_scorer_model_swaps_total" in metrics


def test_corrupted_model_is_refused_and_the_old_version_keeps_serving(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    v1 = publish_tf(dfs, stream, seed=1)
    with ready_scorer(settings, conn) as scorer:
        v2 = publish_tf(dfs, stream, seed=2)  # alias -> v2, then the file rots on the DFS
        with open(v2.path / "model.keras", "r+b") as f:
            f.seek(100)
            f.write(b"\x00corrupt\x00")
        _announce(conn, stream, v2, previous=v1.version)
        eventually(lambda: b'reason="integrity"' in http_get(scorer.http_port, "/metrics")[1],
                 what="integrity failure counted")
        send_json(conn, data, rows(300), key_prefix="x")
        msgs = read_topic(conn, predictions_topic(stream), expect=300)
        assert scorer.holder.current is not None and scorer.holder.current.version == v1.version
    assert {p["model_version"] for p in predictions(msgs)} == {v1.version}
    assert len(msgs) == 300


def test_a_restarted_scorer_whose_alias_names_a_corrupt_version_serves_the_previous_one(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str,
        caplog: pytest.LogCaptureFixture) -> None:
    v1 = publish_tf(dfs, stream, seed=1)
    v2 = publish_tf(dfs, stream, seed=2)  # production -> v2, whose file then rots
    with open(v2.path / "model.keras", "r+b") as f:
        f.seek(100)
        f.write(b"\x00corrupt\x00")
    caplog.set_level(logging.WARNING, logger="headrace.scorers")
    with ready_scorer(settings, conn, model_poll_s=0.5) as scorer:  # ready: not a 503
        send_json(conn, data, rows(200), key_prefix="x")
        msgs = read_topic(conn, predictions_topic(stream), expect=200, settle_s=0)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
                    and "cannot be served" in r.getMessage()]
        assert len(warnings) == 1, warnings
        assert warnings[0].startswith(
            f"model {stream}@production names {stream}:2, which cannot be served ({stream}:2: "
            f"file model.keras has sha256 "), warnings[0]
        assert (f"serving {stream}:1, the alias's most recent intact previous version, "
                f"instead. `headrace models rollback {stream}` points production back at it"
                in warnings[0]), warnings[0]
        # The alias is still watched: a good version published meanwhile is served.
        v3 = publish_tf(dfs, stream, seed=3)
        eventually(lambda: scorer.holder.current is not None
                   and scorer.holder.current.version == v3.version, what="swap to v3")
    assert {p["model_version"] for p in predictions(msgs)} == {v1.version}
