"""RELIABILITY.md guarantee 12, the broker's side (Tansu ignores a topic's max.message.bytes):
a predictions topic whose max.message.bytes is below the scorer producer's message.max.bytes
refuses the batch; the refusal comes back in the delivery report and takes the documented path:
each input dead-lettered once (stage produce, OutputRefused, MSG_SIZE_TOO_LARGE), its offset
committed, the same scorer process going on."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.codecs import encode_arrow
from headrace.streams.topics import TopicSpec
from tests.faults.conftest import needs_scorer
from tests.faults.harness import (
    FEATURES,
    JSON_HEADERS,
    Scorers,
    Stream,
    TopicReader,
    dlq_reason,
    ensure_stream_topics,
    figures,
    good_record,
    produce_all,
    wait_dead_letters,
)
from tests.faults.test_scorer_memory import (
    ARROW_HEADERS,
    _many_class_model,
    assert_refused_outputs_dead_lettered,
    json_outcomes,
)
from tools.kafka_cluster import KafkaCluster

pytestmark = [pytest.mark.slow, pytest.mark.kafka, needs_scorer]
TOPIC_LIMIT = 4096  # bytes; one prediction of a 3 000-class model is ~12 KB in Arrow


def test_a_topic_max_message_bytes_under_the_producers_dead_letters_through_the_report(
        kafka_cluster: KafkaCluster, conn: KafkaConnection, broker: str, dfs: Path,
        tmp_path: Path) -> None:
    stream = Stream(f"fsz{tmp_path.name[-6:].replace('_', '')}", 3)
    ensure_topics(conn, [TopicSpec(stream.predictions, 3, "test",
                                   {"max.message.bytes": str(TOPIC_LIMIT)})])
    ensure_stream_topics(conn, stream)
    name = f"w{stream.name[1:]}"
    _many_class_model(dfs, name, classes=3000)
    scorers = Scorers(stream=stream, model=name, bootstrap=broker, dfs=dfs, log_dir=tmp_path)
    try:
        s = scorers.start()  # the producer's own limit: the default, far above the topic's
        s.wait_ready(timeout_s=90)
        one_row = encode_arrow(pa.table({f: [0.5] for f in FEATURES}))
        offsets = produce_all(conn, stream.data, [(good_record(1), JSON_HEADERS),
                                                  (one_row, ARROW_HEADERS),
                                                  (good_record(2), JSON_HEADERS)])
        preds, dlq = TopicReader(conn, stream.predictions), TopicReader(conn, stream.dlq)

        wait_dead_letters(s, dlq, 3)
        _, letters = json_outcomes(preds.records, dlq.records)
        figures("kafka_topic_refuses_size", dead_letters=len(dlq.records), alive=s.alive(),
                reasons=sorted({dlq_reason(ls[0])[2][:80] for ls in letters.values()}))
        assert_refused_outputs_dead_lettered(conn, stream, s, offsets, letters, preds)
        rc, _ = s.terminate()
        assert rc == 0, s.log_tail()
    finally:
        scorers.cleanup()
