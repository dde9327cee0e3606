"""Dead letters and message headers without a broker: what a dead letter's headers say, how an
oversized value is cut (with its hash), and that a redriven record that fails again carries
one set of ``dlq.*`` headers, the latest. The broker tests check one happy dead letter."""

from __future__ import annotations

import hashlib

from headrace.core.errors import PermanentError, RecordRef, ValidationFailed
from headrace.streams import dlq
from headrace.streams import headers as hdr


def _ref(value: bytes | None, headers: tuple[tuple[str, bytes], ...] = ()) -> RecordRef:
    return RecordRef("events.clicks", 2, 41, b"k", value, headers)


def test_a_dead_letter_keeps_the_records_headers_and_says_where_and_why() -> None:
    ref = _ref(b'{"a": 1}', ((hdr.CONTENT_TYPE, hdr.JSON.encode()), ("trace", b"t1")))
    dead = dlq.DeadLetter.from_error(ref, ValidationFailed("missing feature 'b'", stage="validate"),
                                     row=3)
    h = hdr.to_dict(dead.headers())
    assert h[hdr.CONTENT_TYPE] == hdr.JSON and h["trace"] == "t1"  # a redrive is identical
    assert (h[dlq.DLQ_TOPIC], h[dlq.DLQ_PARTITION], h[dlq.DLQ_OFFSET]) == ("events.clicks", "2",
                                                                            "41")
    assert h[dlq.DLQ_STAGE] == "validate" and h[dlq.DLQ_ERROR_CLASS] == "ValidationFailed"
    assert h[dlq.DLQ_ERROR_MESSAGE] == "missing feature 'b'" and h[dlq.DLQ_ROW] == "3"
    assert dlq.DLQ_TRUNCATED_FROM not in h and dlq.DLQ_VALUE_SHA256 not in h
    assert dead.payload() == b'{"a": 1}'


def test_the_stage_comes_from_the_caller_then_the_error_then_unknown() -> None:
    ref = _ref(b"x")
    assert dlq.DeadLetter.from_error(ref, ValidationFailed("v", stage="decode"),
                                     stage="score").stage == "score"
    assert dlq.DeadLetter.from_error(ref, ValidationFailed("v", stage="decode")).stage == "decode"
    assert dlq.DeadLetter.from_error(ref, PermanentError("p")).stage == "unknown"
    bare = dlq.DeadLetter.from_error(ref, KeyError())
    assert bare.stage == "unknown" and bare.error_message == "KeyError"  # never empty


def _weight(dead: dlq.DeadLetter) -> int:
    """What the letter weighs as a message: key, value and headers."""
    return (len(dead.record.key or b"") + len(dead.payload() or b"")
            + sum(len(k.encode()) + len(v or b"") for k, v in dead.headers()))


def test_an_oversized_value_is_cut_with_its_size_and_hash_and_the_reason_is_capped() -> None:
    value = b"v" * (dlq.MAX_DLQ_MESSAGE_BYTES + 10)
    dead = dlq.DeadLetter.from_error(_ref(value), PermanentError("e" * 5000))
    assert dead.truncated and dead.payload() == value[:dead.value_limit]
    h = hdr.to_dict(dead.headers())
    assert h[dlq.DLQ_TRUNCATED_FROM] == str(len(value))
    assert h[dlq.DLQ_VALUE_SHA256] == hashlib.sha256(value).hexdigest()
    assert len(h[dlq.DLQ_ERROR_MESSAGE]) == dlq.MAX_ERROR_CHARS
    assert _weight(dead) <= dlq.MAX_DLQ_MESSAGE_BYTES - dlq.FRAMING_BYTES + 200
    exact = dlq.DeadLetter.from_error(_ref(value[:dead.value_limit]), PermanentError("e" * 5000))
    assert not exact.truncated and exact.payload() == value[:dead.value_limit]
    assert dlq.DeadLetter.from_error(_ref(None), PermanentError("e")).payload() is None


def test_a_dead_letter_fits_apache_kafkas_default_message_size_whatever_it_carries() -> None:
    """A 1 MiB cut fitted the embedded broker and not Apache Kafka's default topic (1,048,588
    bytes for the whole batch): the letter was refused and lost (D61). Key, headers and a
    multi-byte reason count too."""
    big_headers = tuple((f"h{i}", b"x" * 10_000) for i in range(20))
    ref = RecordRef("events.clicks", 2, 41, b"k" * 50_000, b"v" * 2_000_000, big_headers)
    dead = dlq.DeadLetter.from_error(ref, PermanentError("é" * 3000))
    assert dead.truncated
    assert _weight(dead) > dlq.MAX_DLQ_MESSAGE_BYTES - 2 * dlq.FRAMING_BYTES
    assert _weight(dead) <= dlq.MAX_DLQ_MESSAGE_BYTES < 1_048_588
    assert hdr.to_dict(dead.headers())["h19"] == "x" * 10_000  # a redrive's headers kept


def test_a_redriven_dead_letter_that_fails_again_carries_only_the_new_dlq_headers() -> None:
    first = dlq.DeadLetter.from_error(_ref(b"x" * (dlq.MAX_DLQ_MESSAGE_BYTES + 1)),
                                      ValidationFailed("old", stage="decode"), row=9)
    redriven = RecordRef("events.clicks", 0, 7, b"k", b"small", tuple(first.headers()))
    again = dlq.DeadLetter.from_error(redriven, PermanentError("new"), stage="score")
    names = [k for k, _ in again.headers()]
    assert len(names) == len(set(names)), names  # no header twice
    h = hdr.to_dict(again.headers())
    assert h[dlq.DLQ_ERROR_MESSAGE] == "new" and h[dlq.DLQ_OFFSET] == "7"
    assert dlq.DLQ_ROW not in h and dlq.DLQ_TRUNCATED_FROM not in h  # the old ones are gone


def test_headers_last_value_wins_bytes_decode_leniently_and_none_is_left_out() -> None:
    raw = [("a", b"1"), ("b", None), ("a", b"\xffz"), ("c", "text")]
    assert hdr.to_dict(raw) == {"a": "\ufffdz", "b": "", "c": "text"}
    assert hdr.to_dict({"x": b"y"}) == {"x": "y"} and hdr.to_dict(None) == {}
    assert hdr.get(raw, "a") == "\ufffdz" and hdr.get(raw, "zz") is None
    assert hdr.build({"n": 3, "skip": None, "s": "v"}) == [("n", b"3"), ("s", b"v")]
    assert hdr.build([("k", 1), ("k", 2)]) == [("k", b"1"), ("k", b"2")]
    assert hdr.to_dict(hdr.contract_headers("TrainRequest", 2)) == {
        hdr.CONTENT_TYPE: hdr.JSON, hdr.SCHEMA: "TrainRequest", hdr.SCHEMA_VERSION: "2"}
