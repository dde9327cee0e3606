"""The paced upstream before and after, side by side in one run, and what a transaction adds to
the time until a prediction is visible.

Part 1 (embedded Tansu, then a 1-node Apache Kafka, two rounds each): bench_scoring's paced
latency with the upstream as it was (a new idempotent producer per phase: the measured phase's
first records wait for its producer id) and as it is (one producer for warm-up and measurement);
pass-through and Headrace JSON at 10 000 rows/s.
Part 2 (Apache Kafka, two rounds each): Headrace JSON idempotent and transactional, each run's
latency both to the output's CreateTime and to a ``read_committed`` reader's arrival.

Run: python bench/paced_upstream_ab.py [--tx-only]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import bench_scoring as b  # noqa: E402

from headrace.streams import headers as hdr  # noqa: E402
from headrace.streams.topics import data_topic, predictions_topic  # noqa: E402

RATE = 10_000.0
NEW = b.paced_send


def old_send(bootstrap: str, topic: str, phases: list[tuple[str, list[bytes]]],
             headers: list[tuple[str, bytes]], rate: float, **kw: Any) -> None:
    for phase in phases:  # a producer per phase, as before
        NEW(bootstrap, topic, [phase], headers, rate, **kw)


def topics_on(boot: str) -> Any:
    def topics(tag: str) -> tuple[str, str, str]:
        s = f"b{tag}{uuid.uuid4().hex[:8]}"
        b.ensure(boot, data_topic(s), predictions_topic(s), f"data.{s}.dlq")
        return s, data_topic(s), predictions_topic(s)
    return topics


def main() -> None:
    a = argparse.Namespace(bootstrap=None, broker="both", kafka_brokers=1, quick=True)
    dfs = Path(tempfile.mkdtemp(prefix="bench-dfs-"))
    b.publish_model(dfs)
    records = b.make_records(30_000)
    json_kw: dict[str, Any] = {"batch_size": 8192, "max_wait_ms": 5}
    for kind in () if "--tx-only" in sys.argv else ("tansu", "kafka"):
        with b.broker_of(kind, a) as boot:
            common = {"bootstrap": boot, "dfs": str(dfs), "idempotent": True,
                      "transactional": False}
            for rnd in range(2):
                for arm, fn in (("before", old_send), ("after", NEW)):
                    b.paced_send = fn
                    for cont in ("passthrough", "headrace-json"):
                        kw = {} if cont == "passthrough" else json_kw
                        p50, p99 = b.paced_run(cont, records, hdr.JSON, 1, RATE,
                                               topics_on(boot), **kw, **common)
                        print(f"{kind} round {rnd + 1} {arm:6s} {cont:13s} "
                              f"p50 {p50:6.1f} p99 {p99:6.1f} ms", flush=True)
    b.paced_send = NEW
    with b.broker_of("kafka", a) as boot:
        for tx in (False, True):
            common = {"bootstrap": boot, "dfs": str(dfs), "idempotent": True,
                      "transactional": tx}
            for rnd in range(2):
                s, i, o = topics_on(boot)("p")
                warm = records[:10_000]
                arrivals = b.Arrivals(boot, o)

                def send(i: str = i, warm: list[bytes] = warm) -> None:
                    NEW(boot, i, [("w", warm), ("m", records)],
                        [("content-type", hdr.JSON.encode())], RATE)

                n = len(warm) + len(records)
                b.run_child("headrace-json", stream=s, rows=n, during=send, **json_kw,
                            **common)
                vis = b.latencies(boot, i, o, n, measured_prefix="m", arrivals=arrivals)
                ct = b.latencies(boot, i, o, n, measured_prefix="m")
                print(f"kafka transactional={tx} round {rnd + 1}: CreateTime p50 {ct[0]:6.1f} "
                      f"p99 {ct[1]:6.1f} | read_committed arrival p50 {vis[0]:6.1f} "
                      f"p99 {vis[1]:6.1f} ms", flush=True)


if __name__ == "__main__":
    main()
