"""Every codec a scorer (or a user) may produce -- gzip, snappy, lz4, zstd -- is read by every
Headrace reader: the confluent-kafka readers (tail, dashboard, lineage, drift reports), the
control plane's aiokafka client, and the control plane itself (faust) on ``events.drift``.

Issue 34: scorers produce lz4 by default, and the control plane's aiokafka decodes lz4 only
with ``cramjam``, which nothing declared: the first lz4 drift record crash-looped it. Here a
missing codec fails loudly (by name), and a batch the control plane cannot decode is skipped
and counted instead of stopping it."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka import codec as aiokafka_codec
from aiokafka.consumer import fetcher
from aiokafka.errors import UnsupportedCodecError

from headrace.contracts import DriftDetected, TrainRequested
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.reading import iter_records, read_events
from headrace.streams.topics import ControlTopics, TopicSpec, dlq_topic, predictions_topic
from headrace.trainers.control import undecodable
from tests.fixtures import eventually

CODECS = ("gzip", "snappy", "lz4", "zstd")
PAD = b" " * 256  # librdkafka sends a batch uncompressed when compressing does not shrink it
REQUEST = {"model_name": "demo", "framework": "mxnet", "dataset_uri": "datasets/missing.parquet"}


def drift(feature: str) -> bytes:
    """A drift record's JSON, padded with whitespace (still the same JSON) to be compressed."""
    return DriftDetected(stream="clicks", model_name="demo", model_version=1, feature=feature,
                         statistic="psi", value=0.4, threshold=0.12, drifting=True, window=1,
                         consecutive=1, rows=100, scorer="s0").model_dump_json().encode() + PAD


def produce(conn: KafkaConnection, topic: str, codec: str, value: bytes, key: bytes) -> None:
    """One record in its own batch compressed with ``codec`` (as a scorer's producer does);
    ``value`` must be long and compressible enough for librdkafka to compress it."""
    p = make_producer(conn, **{"compression.type": codec, "linger.ms": 0})
    p.produce(topic, key=key, value=value)
    assert p.flush(15) == 0


def scorer_topics(topics: ControlTopics, stream: str) -> list[str]:
    return [predictions_topic(stream), dlq_topic(stream), topics.drift]


async def _aiokafka_read(bootstrap: str, topic: str, n: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        async with asyncio.timeout(30):
            while len(values) < n:
                for records in (await consumer.getmany(tp, timeout_ms=500)).values():
                    values += [r.value for r in records if r.value is not None]
        return values
    finally:
        await consumer.stop()


def test_the_control_planes_kafka_client_has_every_codec() -> None:
    missing = undecodable.missing_codecs()
    assert not missing, (f"aiokafka cannot decode {', '.join(missing)}: install the control "
                         "extra (pip install 'headrace[control]', which brings cramjam)")


def test_every_reader_reads_every_codec_on_every_topic_a_scorer_writes(
        conn: KafkaConnection, topics: ControlTopics) -> None:
    stream = "s" + uuid.uuid4().hex[:8]
    names = scorer_topics(topics, stream)
    ensure_topics(conn, [TopicSpec(t, 1, "test") for t in names])
    for topic in names:
        for codec in CODECS:
            produce(conn, topic, codec, drift(f"f-{codec}"),
                    codec.encode())
    for topic in names:
        got = [(r.key, DriftDetected.model_validate_json(r.value or b"").feature)
               for r in iter_records(conn, topic, idle_s=1.0)]
        assert got == [(c.encode(), f"f-{c}") for c in CODECS], (topic, got)
        # The control plane's client (aiokafka): raises UnsupportedCodecError on a missing one.
        values = asyncio.run(_aiokafka_read(conn.bootstrap, topic, len(CODECS)))
        assert [DriftDetected.model_validate_json(v).feature for v in values] == [
            f"f-{c}" for c in CODECS], topic


def test_a_batch_the_client_cannot_decode_is_skipped_logged_once_and_counted(
        conn: KafkaConnection, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """lz4 without its library (the env issue 34 found): the old client raised out of the
    consumer on every start; with ``undecodable`` the batch yields nothing, the next one is
    read, one line says what to install, and the count grows."""
    topic = "codecs-" + uuid.uuid4().hex[:8]
    ensure_topics(conn, [TopicSpec(topic, 1, "test")])
    for i, codec in enumerate(("lz4", "gzip", "lz4", "gzip")):
        produce(conn, topic, codec, f"v{i}".encode() + PAD, b"k")
    monkeypatch.setattr(aiokafka_codec, "cramjam", None)  # lz4, snappy, zstd: gone
    # aiokafka's own batch reader, whatever an earlier test of this process installed (a
    # control plane built in-process installs ``undecodable``); put back after the test.
    original = undecodable.SkippingPartitionRecords.__mro__[1]
    monkeypatch.setattr(fetcher, "PartitionRecords", original)
    with pytest.raises(UnsupportedCodecError):  # what the control plane hit before
        asyncio.run(_aiokafka_read(conn.bootstrap, topic, 2))
    undecodable.install()
    before = undecodable.skipped().get(topic, 0)
    with caplog.at_level(logging.ERROR, logger=undecodable.__name__):
        values = asyncio.run(_aiokafka_read(conn.bootstrap, topic, 2))
    assert values == [b"v1" + PAD, b"v3" + PAD]
    assert undecodable.skipped()[topic] - before == 2
    lines = [r.getMessage() for r in caplog.records if topic in r.getMessage()]
    assert len(lines) == 1 and "UnsupportedCodecError" in lines[0], lines
    assert "pip install 'headrace[control]'" in lines[0]


@pytest.mark.slow
def test_the_control_plane_acts_on_drift_records_of_every_codec(
        conn: KafkaConnection, dfs: Path, topics: ControlTopics, tmp_path: Path,
        start_control: Callable[..., subprocess.Popen[bytes]]) -> None:
    """One drift rule per codec, each watching its own feature: a train request per rule
    proves faust decoded that codec's record."""
    rules: list[dict[str, Any]] = [
        {"name": f"drift-{c}", "kind": "drift", "stream": "clicks", "features": [f"f-{c}"],
         "request": REQUEST} for c in CODECS]
    triggers = tmp_path / "t.yaml"
    triggers.write_text(yaml.safe_dump({"rules": rules}))
    proc = start_control(triggers=str(triggers), app_id="codecs")
    for c in CODECS:
        produce(conn, topics.drift, c, drift(f"f-{c}"),
                f"clicks|demo|1|f-{c}".encode())

    def fired() -> list[str]:
        assert proc.poll() is None, "the control plane exited"
        return sorted(r.idempotency_key for r in read_events(
            conn, topics.train_requests, TrainRequested, idle_s=0.5))

    eventually(lambda: len(fired()) == len(CODECS), timeout_s=90, interval_s=0.5,
               what="a train request per codec")
    assert fired() == sorted(f"drift:drift-{c}:1" for c in CODECS)
