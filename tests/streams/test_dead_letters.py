from __future__ import annotations

from collections.abc import Callable

from headrace.core.errors import RecordRef, ValidationFailed
from headrace.streams import dlq
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection, make_producer
from headrace.streams.codecs import decode_json_batch, encode_json
from headrace.streams.producing import Deliveries, flush, produce, write_dead_letter
from tests.fixtures import read_topic


def test_poison_record_lands_in_dlq_with_headers_and_the_partition_keeps_flowing(
    conn: KafkaConnection, topic_factory: Callable[..., str]
) -> None:
    src, dead = topic_factory(), topic_factory()
    p = make_producer(conn)
    values = [encode_json({"x": 1.0}), b"\xff\xfe not json", encode_json({"x": 2.0})]
    for v in values:
        produce(p, src, v, b"k", hdr.build({hdr.CONTENT_TYPE: hdr.JSON}))
    p.flush(10)

    msgs = read_topic(conn, src, expect=3)
    batch = decode_json_batch([m.value() for m in msgs])
    tracker = Deliveries()
    for i, exc in batch.errors:
        m = msgs[i]
        ref = RecordRef(m.topic(), m.partition(), m.offset(), m.key(), m.value(),
                        tuple(m.headers() or ()))
        write_dead_letter(p, dead, dlq.DeadLetter.from_error(ref, exc), on_delivery=tracker)
    flush(p, tracker, timeout_s=10)

    assert batch.table.column("x").to_pylist() == [1.0, 2.0]  # the good ones after it decode
    [letter] = read_topic(conn, dead, expect=1)
    h = hdr.to_dict(letter.headers())
    assert letter.value() == values[1] and letter.key() == b"k"
    assert h[dlq.DLQ_TOPIC] == src
    assert h[dlq.DLQ_PARTITION] == "0" and h[dlq.DLQ_OFFSET] == str(msgs[1].offset())
    assert h[dlq.DLQ_STAGE] == "decode"
    assert h[dlq.DLQ_ERROR_CLASS] == ValidationFailed.__name__
    assert "undecodable JSON" in h[dlq.DLQ_ERROR_MESSAGE]
    assert h[hdr.CONTENT_TYPE] == hdr.JSON  # original headers kept for a faithful redrive
