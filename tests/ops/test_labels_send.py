"""Issue 34: `headrace labels send STREAM FILE` publishes labels the scorer's label join counts:
keyed by the records' keys, on the partitions the records' own producer picks, valued as
parse_label reads them; a bad file is refused whole without echoing its contents."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest

from headrace.cli import main
from headrace.scorers.rollout.label_join import LabelJoin, follow_labels, parse_label
from headrace.scorers.rollout.live_counts import BatchRows, LiveComparison, Pair
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.producing import BatchProducer
from headrace.streams.reading import iter_records
from headrace.streams.topics import TopicSpec, data_topic, labels_topic
from tests.fixtures import eventually

CLASSES = ("no", "yes")


def _comparison() -> LiveComparison:
    comp = LiveComparison(Pair("s", "m", 1, 2), CLASSES)
    empty = np.zeros(0, np.int64)
    comp.add(BatchRows(0, 0, empty, empty, empty, np.zeros(0), np.zeros(0), empty, empty))
    return comp


def test_sent_labels_are_joined_by_the_scorers_label_join(
        conn: KafkaConnection, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stream = f"lab{uuid.uuid4().hex[:8]}"
    ensure_topics(conn, [TopicSpec(data_topic(stream), 3, "test")])
    keys = [f"user-{i}" for i in range(40)]
    truth = ["yes" if i % 3 else "no" for i in range(40)]
    jsonl = tmp_path / "labels.jsonl"
    jsonl.write_text("".join(json.dumps({"key": k, "label": t}) + "\n"
                             for k, t in zip(keys[:20], truth[:20], strict=True)))
    csv_file = tmp_path / "labels.csv"
    csv_file.write_text("key,label\n" + "".join(f"{k},{t}\n"
                                                for k, t in zip(keys[20:], truth[20:],
                                                                strict=True)))
    for f in (jsonl, csv_file):
        assert main(["--bootstrap", conn.bootstrap, "labels", "send", stream, str(f)]) == 0
    said = capsys.readouterr().out
    assert f"sent 20 labels to {labels_topic(stream)} (created the topic" in said

    got = list(iter_records(conn, labels_topic(stream), idle_s=2.0))
    assert sorted(r.key for r in got) == sorted(k.encode() for k in keys)  # type: ignore[type-var]
    assert all(parse_label(r.value or b"") in CLASSES for r in got)
    # On the partition the records' producer (send, predict) puts the same key on.
    records = BatchProducer(conn)
    records.produce_many(data_topic(stream), [b"{}"] * len(keys), [k.encode() for k in keys], [])
    records.flush(10)
    on_data = {r.key: r.partition for r in iter_records(conn, data_topic(stream), idle_s=2.0)}
    assert {r.key: r.partition for r in got} == on_data

    # The scorer's join: each version predicted "yes" for every key; the labels join them.
    join, comp = LabelJoin(max_records=1000, max_age_s=3600), _comparison()
    join.active = True
    join.predicted(comp, [k.encode() for k in keys], np.zeros(len(keys), np.int64),
                   np.ones(len(keys), np.int64), np.ones(len(keys), np.int64))
    stop = threading.Event()
    t = threading.Thread(target=follow_labels, args=(conn, labels_topic(stream), join, stop),
                         daemon=True)
    t.start()
    try:
        eventually(lambda: join.stats.joined == len(keys), timeout_s=30, interval_s=0.1,
                   what="every label joined")
    finally:
        stop.set()
        t.join(10)
    assert join.stats.unknown == 0
    assert comp.total().production_truth.tolist() == [[0, truth.count("no")],
                                                      [0, truth.count("yes")]]


def test_a_bad_labels_file_is_refused_whole_without_its_contents(
        conn: KafkaConnection, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stream = f"lab{uuid.uuid4().hex[:8]}"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"key": "a", "label": "yes"}\n{"key": "SECRET-1", "label": true}\n'
                   '[[[[\n{"label": "no"}\n')
    assert main(["--bootstrap", conn.bootstrap, "labels", "send", stream, str(bad)]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "3 bad lines, nothing sent" in err
    assert "line 2" in err and "line 3: not JSON" in err and "line 4" in err
    assert "SECRET" not in err and "Traceback" not in err
