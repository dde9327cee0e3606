from __future__ import annotations

import json
import time
from pathlib import Path

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
