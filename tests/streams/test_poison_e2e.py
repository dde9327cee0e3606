"""A poison record on the embedded broker: ``headrace tail`` prints the records after it and
exits 0, and the label join keeps joining the valid labels after it (issue 34). Plus the two
CLI findings: no error quotes a refused file, and ``send`` keys records by their ``key``."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from headrace.cli import main
from headrace.streams.clients import KafkaConnection, make_producer
from tests.fixtures import eventually, read_all

DEEP = b"[" * 100_000  # RecursionError in json.loads: killed tail and the labels thread


def _produce(conn: KafkaConnection, topic: str, records: list[tuple[bytes | None, bytes]]
             ) -> None:
    p = make_producer(conn)
    for key, value in records:
        p.produce(topic, value, key)
    assert p.flush(30) == 0


def test_tail_prints_the_records_after_a_poison_one_and_exits_0(
        broker: str, conn: KafkaConnection, topic_factory: Callable[..., str],
        capsys: pytest.CaptureFixture[str]) -> None:
    topic = topic_factory(prefix="events.train-requests.dlq")
    _produce(conn, topic, [(b"a", b'{"n": 1}'), (b"b", DEEP), (b"\xff" * 3, b'{"n": 2}'),
                           (None, b'{"a":' * 100_000), (b"c", b'{"n": 3}')])
    rc = main(["--bootstrap", broker, "tail", topic, "--from-beginning", "--max", "5",
               "--idle-timeout", "20", "--json"])
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert rc == 0
    assert [m["value"] for m in out if isinstance(m["value"], dict)] == [
        {"n": 1}, {"n": 2}, {"n": 3}]
    assert sum(isinstance(m["value"], str) and m["value"].startswith("[[[") for m in out) == 1


def test_the_label_join_keeps_joining_valid_labels_after_a_poison_one(
        conn: KafkaConnection, topic_factory: Callable[..., str]) -> None:
    from headrace.scorers.rollout.label_join import LabelJoin, follow_labels
    from tests.scorers.test_label_join import _comparison, _predict

    topic = topic_factory(prefix="labels")
    join, comp = LabelJoin(max_records=100, max_age_s=600), _comparison()
    join.active = True
    _predict(join, comp, [b"k1", b"k2"], [1, 0], [0, 0])
    _produce(conn, topic, [(b"k1", b'{"label": "yes"}'), (b"k2", DEEP),
                           (b"k2", b"\xff\xfe"), (None, b'"no"'), (b"k2", b'"no"')])
    stop = threading.Event()
    t = threading.Thread(target=follow_labels, args=(conn, topic, join, stop), daemon=True)
    t.start()
    try:
        eventually(lambda: join.stats.joined == 2, timeout_s=30, what="both valid labels")
        assert t.is_alive()  # the thread died on the poison label before
    finally:
        stop.set()
        t.join(10)
    assert join.stats.bad == 3 and comp.total().labelled == 2


def test_send_keys_jsonl_records_by_their_key_field_as_predict_does(
        broker: str, conn: KafkaConnection, tmp_path: Path) -> None:
    from headrace.scorers.offline import read_path

    stream = f"s{uuid.uuid4().hex[:8]}"
    assert main(["--bootstrap", broker, "topics", "--create", "--stream", stream]) == 0
    path = tmp_path / "r.jsonl"
    rows = [{"key": f"k{i}", "x": i} for i in range(5)] + [{"key": None, "x": 9}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["--bootstrap", broker, "--dfs-root", str(tmp_path), "send", stream,
                 str(path)]) == 0
    got = {json.loads(r.value or b"")["x"]: r.key for r in read_all(conn, f"data.{stream}")}
    want = {r["x"]: None if k is None else k.encode()
            for r, k in zip(rows, read_path(path)[1], strict=True)}
    assert got == want and got[3] == b"k3" and got[9] is None  # all None before


@pytest.mark.parametrize("text, commands", [
    # pyarrow: "Expected 3 columns, got 2: SECRET-7731,4"
    ("a,b,c\n1,2,3\nSECRET-7731,4\n", ("predict", "send", "datasets")),
    ('a,b\n1,2\n"SECRET-7731\n', ("predict", "send", "datasets")),
    # a text cell in a number column (a dataset takes it: the column is text)
    ("a,b\n1,2\n3,4\n5,SECRET-7731\n6,7\n", ("predict", "send")),
])
def test_predict_send_and_datasets_errors_never_quote_the_refused_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
        commands: tuple[str, ...]) -> None:
    path = tmp_path / "refused.csv"
    path.write_text(text)
    every = {"predict": ["predict", "m", str(path)], "send": ["send", "s", str(path)],
             "datasets": ["datasets", "put", str(path)]}
    for args in (every[c] for c in commands):
        rc = main(["--dfs-root", str(tmp_path), "--bootstrap", "127.0.0.1:1", *args])
        err = capsys.readouterr().err
        assert rc != 0 and "refused.csv" in err and "Traceback" not in err
        assert "SECRET" not in err
