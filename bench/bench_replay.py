"""Replay throughput against the pass-through ceiling, side by side in one run.

    .venv/bin/python bench/bench_replay.py [--records 300000] [--partitions 3] [--rounds 2]

Contenders, each copying the same source topic into a fresh target topic:

* pass-through: assign, consume in batches, produce the same bytes (key, value, headers,
  partition); no decode, no extra headers, no checkpoint. The ceiling.
* replay: ``headrace.ops.replaying`` as the CLI runs it (range reader, replay headers, flush +
  checkpoint on the DFS every second), timed from the first read to the final checkpoint;
  range resolution (verified end offsets) is timed separately.

Target: replay >= 70% of pass-through rows/s. Uses HEADRACE_BOOTSTRAP if set, else an embedded
broker. Absolute figures drift on shared machines; the ratio is the result.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from headrace.ops import replaying
from headrace.streams.broker import EmbeddedBroker
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.producing import BatchProducer, produce
from headrace.streams.reading import RangeReader, probe_ends
from headrace.streams.topics import TopicSpec


def fill(conn: KafkaConnection, topic: str, records: int, partitions: int) -> None:
    p = make_producer(conn)
    payload = b'{"f0":0.123456,"f1":1.234567,"f2":2.345678,"f3":3.456789,"id":"%08d"}'
    headers = [("content-type", b"application/json")]
    for i in range(records):
        while True:
            try:
                p.produce(topic, value=payload.replace(b"%08d", b"%08d" % i),
                          key=b"k%d" % (i % 1000), partition=i % partitions, headers=headers)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


def pass_through(conn: KafkaConnection, source: str, target: str, partitions: int) -> float:
    bounds = probe_ends(conn, source, range(partitions))
    sink = BatchProducer(conn)
    producer = sink.producer
    n = 0
    t0 = time.perf_counter()
    with RangeReader(conn, source, bounds, purpose="bench") as reader:
        while not reader.done:
            for m in reader.poll(10_000, 0.5):
                produce(producer, target, m.value(), m.key(), m.headers(),
                        partition=m.partition())
                n += 1
            producer.poll(0)
    sink.flush(120)
    return n / (time.perf_counter() - t0)


def replay(conn: KafkaConnection, root: Path, source: str, target: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    cp = replaying.plan(conn, source=source, into=target)
    t_plan = time.perf_counter() - t0
    result = replaying.run(conn, root, cp)
    assert result.completed
    return result.records_in / result.elapsed_s, t_plan


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    broker = None
    bootstrap = os.environ.get("HEADRACE_BOOTSTRAP")
    if not bootstrap:
        broker = EmbeddedBroker().start()
        bootstrap = broker.bootstrap
    conn = KafkaConnection(bootstrap=bootstrap, timeout_s=30)
    try:
        def topic() -> str:
            name = f"bench-{uuid.uuid4().hex[:10]}"
            ensure_topics(conn, [TopicSpec(name, args.partitions, "bench")])
            return name

        source = topic()
        t0 = time.perf_counter()
        fill(conn, source, args.records, args.partitions)
        print(f"source: {args.records} records x ~90 B in {args.partitions} partitions "
              f"(filled in {time.perf_counter() - t0:.1f}s); broker {bootstrap}")
        pt: list[float] = []
        rp: list[float] = []
        plans: list[float] = []
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.rounds):
                pt.append(pass_through(conn, source, topic(), args.partitions))
                rate, t_plan = replay(conn, Path(tmp), source, topic())
                rp.append(rate)
                plans.append(t_plan)
                print(f"round {r + 1}: pass-through {pt[-1]:>10,.0f} rows/s   "
                      f"replay {rp[-1]:>10,.0f} rows/s   ratio {rp[-1] / pt[-1]:.2f}   "
                      f"(range resolution {t_plan:.2f}s)")
        ratio = statistics.median(rp) / statistics.median(pt)
        print(f"median: pass-through {statistics.median(pt):,.0f} rows/s, replay "
              f"{statistics.median(rp):,.0f} rows/s, ratio {ratio:.2f} (target >= 0.70) "
              f"{'OK' if ratio >= 0.7 else 'BELOW TARGET'}")
        return 0
    finally:
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
