"""The operator's librdkafka settings (HEADRACE_KAFKA_CONFIG): a tuning they give is the one
the clients use (it was silently replaced by Headrace's defaults); a setting the guarantees
rest on is refused in one line, by the CLI and by the chart's schema alike. The scorer's
predictions go lz4-compressed unless the operator says otherwise."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from headrace.cli import main
from headrace.core.errors import ConfigError
from headrace.scorers.engine.stream_io import SCORER_PRODUCER
from headrace.streams.clients import (
    CONSUMER_DEFAULTS,
    PRODUCER_DEFAULTS,
    RESERVED,
    KafkaConnection,
    ensure_topics,
)
from headrace.streams.producing import BatchProducer
from headrace.streams.topics import TopicSpec
from tests.fixtures import read_all

REPO = Path(__file__).resolve().parents[2]


def test_the_operators_tuning_wins_over_defaults_and_the_callers() -> None:
    conn = KafkaConnection("k:9092", extra={"linger.ms": "50", "compression.type": "lz4",
                                            "fetch.wait.max.ms": "100",
                                            "security.protocol": "SSL"})
    producer = conn.producer_config(**{"linger.ms": 0, "batch.num.messages": 7})
    assert producer["linger.ms"] == "50" and producer["compression.type"] == "lz4"
    assert producer["batch.num.messages"] == 7  # the caller's, the operator gave none
    assert producer["enable.idempotence"] is True and producer["acks"] == "all"
    assert producer["security.protocol"] == "SSL" and producer["bootstrap.servers"] == "k:9092"
    consumer = conn.consumer_config("g", **{"fetch.wait.max.ms": 1})
    assert consumer["fetch.wait.max.ms"] == "100" and consumer["group.id"] == "g"
    assert consumer["isolation.level"] == CONSUMER_DEFAULTS["isolation.level"]
    plain = KafkaConnection("k:9092").producer_config()
    assert {k: plain[k] for k in PRODUCER_DEFAULTS} == PRODUCER_DEFAULTS


@pytest.mark.parametrize("key", ["acks", "enable.idempotence", "enable.auto.commit",
                                 "isolation.level", "group.id", "on_delivery", " ACKS"])
def test_a_setting_the_guarantees_rest_on_is_refused_naming_it(key: str) -> None:
    with pytest.raises(ConfigError) as err:
        KafkaConnection("k:9092", extra={key: "1"})
    assert str(err.value).startswith(f"HEADRACE_KAFKA_CONFIG: {key} is set by Headrace (")
    assert str(err.value).endswith("); remove it")


def test_the_cli_says_it_in_one_line_and_exits_non_zero(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    monkeypatch.setenv("HEADRACE_KAFKA_CONFIG", json.dumps({"enable.auto.commit": "true"}))
    monkeypatch.setenv("HEADRACE_DFS_ROOT", str(tmp_path))
    code = main(["--bootstrap", "127.0.0.1:1", "topics"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1, err
    assert "enable.auto.commit is set by Headrace" in err[0]
    assert "Traceback" not in err[0]


def test_the_charts_schema_refuses_the_same_keys() -> None:
    schema = json.loads((REPO / "helm/headrace/values.schema.json").read_text())
    refused = schema["properties"]["kafka"]["properties"]["config"]["propertyNames"]["not"]
    assert set(refused["enum"]) == set(RESERVED)


def _sent_bytes(conn: KafkaConnection, topic: str, values: list[bytes]) -> int:
    """What a scorer's producer on ``conn`` puts on the wire for ``values`` (its statistics:
    bytes sent to the brokers, requests included)."""
    stats: list[dict[str, Any]] = []
    producer = BatchProducer(conn, **{"stats_cb": lambda s: stats.append(json.loads(s)),
                                      "statistics.interval.ms": 100})
    assert producer.produce_many(topic, values, [None] * len(values), []) == []
    producer.flush(30.0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (stats and stats[-1]["txmsgs"] >= len(values)):
        producer.poll()
        time.sleep(0.05)
    return sum(int(b["txbytes"]) for b in stats[-1]["brokers"].values())


def test_an_operators_compression_is_used_and_the_records_read_back(conn: KafkaConnection
                                                                     ) -> None:
    topic = f"t-lz4-{uuid.uuid4().hex[:8]}"
    ensure_topics(conn, [TopicSpec(topic, 1, "test")])
    values = [json.dumps({"i": i, "pad": "x" * 400}).encode() for i in range(500)]
    plain = _sent_bytes(conn, topic, values)
    lz4 = _sent_bytes(KafkaConnection(conn.bootstrap, extra={"compression.type": "lz4"}),
                      topic, values)
    assert lz4 < plain / 4, (lz4, plain)  # 200 kB of repetitive JSON
    got = [r.value for r in read_all(conn, topic)]
    assert got == values * 2


def test_the_scorers_predictions_are_lz4_unless_the_operator_says_otherwise() -> None:
    mine = BatchProducer(KafkaConnection("127.0.0.1:1"), **SCORER_PRODUCER)
    theirs = BatchProducer(KafkaConnection("127.0.0.1:1", extra={"compression.type": "zstd"}),
                           **SCORER_PRODUCER)
    assert mine._conf["compression.type"] == "lz4"
    assert theirs._conf["compression.type"] == "zstd"
    assert theirs._conf["delivery.report.only.error"] is True  # the rest of the profile kept


def test_an_operators_transaction_timeout_is_the_one_a_transactional_producer_uses() -> None:
    # A shorter timeout bounds how long a killed transactional scorer's open transaction holds
    # back read_committed readers (found with the zombie test on Apache Kafka).
    theirs = BatchProducer(KafkaConnection("127.0.0.1:1",
                                           extra={"transaction.timeout.ms": "15000"}),
                           transactional_id="t-1")
    mine = BatchProducer(KafkaConnection("127.0.0.1:1"), transactional_id="t-2")
    assert theirs._conf["transaction.timeout.ms"] == "15000"
    assert mine._conf["transaction.timeout.ms"] == 60_000
