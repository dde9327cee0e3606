"""DLQ list / show / redrive: every letter redriven once, a second redrive refused."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from headrace.core.errors import RecordRef, ValidationFailed
from headrace.core.settings import Settings
from headrace.ops import deadletters
from headrace.ops.provenance import REDRIVE_DLQ_OFFSET, REDRIVE_ID
from headrace.streams import dlq as dlqh
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.dlq import DeadLetter
from headrace.streams.producing import write_dead_letter
from headrace.streams.topics import catalog, data_topic, dlq_topic
from tests.fixtures import read_all


def _letters(conn: KafkaConnection, stream: str,
             specs: list[tuple[int, bytes, Exception, str]]) -> None:
    p = make_producer(conn)
    failed: list[object] = []
    for offset, value, exc, stage in specs:
        ref = RecordRef(data_topic(stream), 1, offset, key=b"key-%d" % offset, value=value,
                        headers=(("content-type", b"application/json"), ("trace", b"t%d" % offset)))
        write_dead_letter(p, dlq_topic(stream), DeadLetter.from_error(ref, exc, stage=stage),
                          on_delivery=lambda err, _msg: failed.append(err) if err else None)
    assert p.flush(10) == 0
    assert not failed, failed  # a refused letter is lost: say so here, not as a missing read


@pytest.fixture
def stream(conn: KafkaConnection, settings: Settings) -> str:
    ensure_topics(conn, catalog(settings))
    name = settings.streams[0]
    _letters(conn, name, [
        (10, b'{"x": "oops"}', ValidationFailed("x: not a number"), "decode"),
        (11, b"\xff\xfe", ValidationFailed("undecodable JSON record"), "decode"),
        (12, b'{"x": 1e999}', ValueError("NaN in features"), "validate"),
    ])
    return name


def test_list_groups_dead_letters_by_reason(conn: KafkaConnection, stream: str) -> None:
    groups = deadletters.summarize(deadletters.read_letters(conn, stream))
    assert [(g.error_class, g.stage, g.count, g.sample_message) for g in groups] == [
        ("ValidationFailed", "decode", 1, "undecodable JSON record"),
        ("ValidationFailed", "decode", 1, "x: not a number"),
        ("ValueError", "validate", 1, "NaN in features")]


def test_show_previews_headers_and_payload(conn: KafkaConnection, stream: str) -> None:
    letters = deadletters.select(deadletters.read_letters(conn, stream), offsets=["1"])
    shown = letters[0].to_json()
    assert shown["source_offset"] == 11 and shown["stage"] == "decode"
    assert shown["headers"]["trace"] == "t11" and shown["preview"] == b"\xff\xfe".decode(
        "utf-8", "replace")


def test_redrive_moves_each_letter_once_and_refuses_a_second_redrive(
    conn: KafkaConnection, dfs: Path, stream: str,
) -> None:
    result = deadletters.redrive(conn, dfs, stream, error_class="ValidationFailed")
    assert result.letters == 2
    moved = read_all(conn, data_topic(stream))
    assert sorted(r.value for r in moved) == sorted([b'{"x": "oops"}', b"\xff\xfe"])
    for r in moved:
        assert r.partition == 1 and r.key in (b"key-10", b"key-11")
        names = [k for k, _ in r.headers]
        assert not any(n.startswith("dlq.") for n in names)
        assert r.header("trace") in ("t10", "t11") and r.header(REDRIVE_ID) == result.redrive_id
        assert r.header(REDRIVE_DLQ_OFFSET) in ("0:0", "0:1")

    with pytest.raises(ValidationFailed, match="already redriven") as err:
        deadletters.redrive(conn, dfs, stream, offsets=["0"])
    assert "\n" not in str(err.value)
    with pytest.raises(ValidationFailed, match="were already redriven"):
        deadletters.redrive(conn, dfs, stream, error_class="ValidationFailed")
    assert len(read_all(conn, data_topic(stream))) == 2

    rest = deadletters.redrive(conn, dfs, stream)  # only the one not yet redriven
    assert rest.letters == 1 and rest.skipped_already == ["0:0", "0:1"]
    assert len(read_all(conn, data_topic(stream))) == 3
    ledger = deadletters.load_ledger(dfs, stream)
    assert sorted(e["letter"] for e in ledger.entries if e["state"] == "done") == [
        "0:0", "0:1", "0:2"]


def test_dry_run_redrive_writes_nothing(conn: KafkaConnection, dfs: Path, stream: str) -> None:
    result = deadletters.redrive(conn, dfs, stream, dry_run=True)
    assert result.letters == 3 and "would redrive 3" in result.lines()[0]
    assert read_all(conn, data_topic(stream)) == []
    assert deadletters.load_ledger(dfs, stream).entries == []


def test_a_claim_left_by_a_crash_counts_as_redriven_only_if_the_record_was_sent(
    conn: KafkaConnection, dfs: Path, stream: str,
) -> None:
    deadletters.redrive(conn, dfs, stream, offsets=["0"])
    ledger = deadletters.load_ledger(dfs, stream)
    claimed = [e for e in ledger.entries if e["state"] == "claimed"]
    # Crash after the produce, before "done": the record is in the source topic.
    # Crash before the produce: a claim for letter 0:1 whose record was never sent.
    never_sent = {**claimed[0], "letter": "0:1",
                  "fingerprint": deadletters.select(deadletters.read_letters(conn, stream),
                                                    offsets=["1"])[0].fingerprint}
    ledger.path.write_text("".join(json.dumps(e) + "\n" for e in [*claimed, never_sent]))

    with pytest.raises(ValidationFailed, match="already redriven"):
        deadletters.redrive(conn, dfs, stream, offsets=["0"])
    again = deadletters.redrive(conn, dfs, stream, offsets=["1"])
    assert again.letters == 1
    assert sorted(r.value for r in read_all(conn, data_topic(stream))) == sorted(
        [b'{"x": "oops"}', b"\xff\xfe"])


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"offsets": ["7"]}, "no dead letter at 0:7"),
    ({"offsets": ["x"]}, "bad dead-letter offset"),
    ({"error_class": "NoSuchError"}, "no dead letters of class NoSuchError"),
])
def test_bad_redrive_input_is_refused_and_writes_nothing(
    conn: KafkaConnection, dfs: Path, stream: str, kwargs: dict[str, object], message: str,
) -> None:
    with pytest.raises(ValidationFailed, match=message):
        deadletters.redrive(conn, dfs, stream, **kwargs)  # type: ignore[arg-type]
    assert read_all(conn, data_topic(stream)) == []


def test_unknown_stream_has_no_dead_letter_topic(conn: KafkaConnection,
                                                 topic_factory: Callable[..., str]) -> None:
    with pytest.raises(ValidationFailed, match="has no dead-letter topic"):
        deadletters.read_letters(conn, "nosuchstream123")


def test_a_truncated_dead_letter_is_kept_with_its_hash_and_never_redriven(
    conn: KafkaConnection, dfs: Path, stream: str,
) -> None:
    huge = b'{"x": "' + b"y" * (dlqh.MAX_DLQ_MESSAGE_BYTES + 10) + b'"}'
    _letters(conn, stream, [(13, huge, ValidationFailed("too big"), "decode")])
    [letter] = [lt for lt in deadletters.read_letters(conn, stream)
                if lt.h(dlqh.DLQ_OFFSET) == "13"]
    assert letter.record.value is not None
    assert len(letter.record.value) > dlqh.MAX_DLQ_MESSAGE_BYTES - 2 * dlqh.FRAMING_BYTES
    assert letter.record.value == huge[: len(letter.record.value)]
    assert letter.h(dlqh.DLQ_TRUNCATED_FROM) == str(len(huge))
    assert letter.h(dlqh.DLQ_VALUE_SHA256) == hashlib.sha256(huge).hexdigest()
    with pytest.raises(ValidationFailed, match="cannot be redriven"):
        deadletters.redrive(conn, dfs, stream, offsets=[letter.ref])
    assert read_all(conn, data_topic(stream)) == []
