from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from headrace.core.settings import Settings
from headrace.streams.clients import KafkaConnection
from headrace.streams.topics import predictions_topic
from tests.scorers.conftest import (
    eventually,
    http_get,
    publish_tf,
    read_topic,
    rows,
    scorer_thread,
    send_json,
    wait_ready,
)


def test_not_ready_until_a_model_is_loaded_and_warmed_then_metrics_report(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    with scorer_thread(settings, conn, partitions="", model_poll_s=0.5) as scorer:
        code, body = http_get(scorer.http_port, "/readyz")
        assert code == 503 and json.loads(body)["model_ready"] is False
        assert http_get(scorer.http_port, "/livez")[0] == 200
        time.sleep(1.0)  # the scorer keeps retrying the missing model
        assert http_get(scorer.http_port, "/readyz")[0] == 503
        mv = publish_tf(dfs, stream)
        wait_ready(scorer)  # group mode: ready only once partitions are assigned
        body = json.loads(http_get(scorer.http_port, "/readyz")[1])
        assert body["model"] == f"{stream}:{mv.version}" and body["partitions"] == 3
        send_json(conn, data, rows(700))
        read_topic(conn, predictions_topic(stream), expect=700, settle_s=0)
        eventually(lambda: b"headrace_scorer_rows_total{stream=" in http_get(
            scorer.http_port, "/metrics")[1], what="metrics")
        eventually(lambda: b"headrace_scorer_consumer_lag{" in http_get(
            scorer.http_port, "/metrics")[1], what="lag gauge")
        text = http_get(scorer.http_port, "/metrics")[1].decode()
        assert http_get(scorer.http_port, "/livez")[0] == 200
        assert http_get(scorer.http_port, "/nope")[0] == 404
    figures = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
               if line and not line.startswith("#")}
    assert figures[f'headrace_scorer_rows_total{{stream="{stream}"}}'] == 700
    assert figures[f'headrace_scorer_model_version{{model="{stream}"}}'] == mv.version
    assert figures[f'headrace_scorer_latency_seconds_count{{stream="{stream}"}}'] == 700
    assert figures[f'headrace_scorer_batch_rows_count{{stream="{stream}"}}'] >= 1
    assert any(k.startswith("headrace_scorer_consumer_lag{") for k in figures)
    assert f'headrace_scorer_ready{{stream="{stream}"}}' in figures


def test_a_scorer_whose_consumer_stops_fetching_goes_unready_and_says_why(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    """A real stall, injected: the scorer's own consumer is paused on its loop's thread
    (librdkafka stops fetching, polls return nothing, the position stays), as when its group
    coordinator hung, while records keep arriving. Only the broker's high watermark, read
    afresh, shows them (a cached one is not updated for a partition nobody fetches). Old code:
    ready and live throughout (every empty poll counted as progress)."""
    from confluent_kafka import TopicPartition

    publish_tf(dfs, stream)
    with scorer_thread(settings, conn, stall_s=2.0, lag_check_s=0.3) as scorer:
        wait_ready(scorer)
        send_json(conn, data, rows(50))
        read_topic(conn, predictions_topic(stream), expect=50, settle_s=0)
        assert scorer.worker is not None
        io = scorer.worker.io
        consume, paused = io.consume_batch, {"want": True, "done": False}
        parts = [TopicPartition(data, p) for p in (0, 1, 2)]

        def faulty(n: int, timeout_s: float) -> Any:
            # The consumer's handle is used on its own thread only (librdkafka + the logger
            # callback can deadlock when pause() comes from another thread beside a poll).
            if paused["want"] != paused["done"]:
                (io.consumer.pause if paused["want"] else io.consumer.resume)(parts)
                paused["done"] = paused["want"]
            return consume(n, timeout_s)

        io.consume_batch = faulty  # type: ignore[method-assign]
        eventually(lambda: paused["done"], what="the consumer paused")
        send_json(conn, data, rows(30, seed=2), start=50)
        eventually(lambda: http_get(scorer.http_port, "/readyz")[0] == 503, timeout_s=30,
                   what="/readyz failing on the stall")
        body = json.loads(http_get(scorer.http_port, "/readyz")[1])
        assert body["reason_code"] == "stalled" and "unconsumed records" in body["reason"]
        code, live = http_get(scorer.http_port, "/livez")
        assert code == 503 and json.loads(live)["reason_code"] == "stalled"
        text = http_get(scorer.http_port, "/metrics")[1].decode()
        assert f'headrace_scorer_stalled{{stream="{stream}"}} 1.0' in text
        paused["want"] = False
        wait_ready(scorer)  # it consumes again: ready without a restart
        read_topic(conn, predictions_topic(stream), expect=80, settle_s=0)
