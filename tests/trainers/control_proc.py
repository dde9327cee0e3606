"""A control-plane process for tests: ``python -m tests.trainers.control_proc CONFIG_JSON``.

Test seams: ``crash_once_file`` makes the first train request (across restarts: the file
records it) raise what a fatal idempotent producer raised in the field, uncaught by the router
(``KafkaException(OUT_OF_ORDER_SEQUENCE_NUMBER, fatal)``), or with ``crash_kind: "bug"`` a
``KeyError`` (a bug met on that request); ``http_port`` fixes the probes' port.
And the clock: with ``now_file`` set, ``now`` is read from that file
(an ISO time), so a test can move time forward across restarts. With ``clock_log`` set, every
time read is appended to that file: the schedules tick reads the clock once per tick, so a
test can wait until the control plane has ticked at a given time instead of sleeping.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from headrace.streams.clients import KafkaConnection
from headrace.streams.topics import ControlTopics
from headrace.trainers.control.service import ExecutorChoice, run_control
from headrace.trainers.control.settings import ControlSettings
from headrace.trainers.control.triggers import load_triggers
from headrace.trainers.limits import RequestCaps


def main() -> None:
    cfg = json.loads(sys.argv[1])
    now_file = cfg.get("now_file")
    clock_log = cfg.get("clock_log")

    def now() -> datetime:
        t = (datetime.fromisoformat(Path(now_file).read_text().strip()) if now_file
             else datetime.now(UTC))
        if clock_log:
            with open(clock_log, "a") as f:
                f.write(t.isoformat() + "\n")
        return t

    crash_once = cfg.get("crash_once_file")
    if crash_once:
        from confluent_kafka import KafkaError, KafkaException

        from headrace.trainers.control.plane import ControlPlane

        routed = ControlPlane.on_request

        def crashing(self: ControlPlane, record: Any, table: Any) -> str | None:
            if not Path(crash_once).exists():
                Path(crash_once).write_text("crashed")
                if cfg.get("crash_kind") == "bug":
                    raise KeyError("a bug met on this request")
                raise KafkaException(KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                                "Broker: Out of order sequence number",
                                                fatal=True))
            return routed(self, record, table)

        ControlPlane.on_request = crashing  # type: ignore[method-assign]
    choice = ExecutorChoice(ControlSettings(executor="local",
                                            control_http_port=cfg.get("http_port", 0),
                                            **cfg.get("settings", {})))
    run_control(
        root=Path(cfg["root"]),
        conn=KafkaConnection(cfg["bootstrap"], extra=cfg.get("kafka_config", {}), timeout_s=15.0),
        topics=ControlTopics.with_prefix(cfg["prefix"]),
        triggers=load_triggers(Path(cfg["triggers"]) if cfg.get("triggers") else None),
        app_id=cfg.get("app_id", "headrace-control"), max_attempts=cfg.get("max_attempts", 3),
        backoff_s=cfg.get("backoff_s", 0.2), now=now, tick_s=0.2,
        caps=RequestCaps(**cfg.get("caps", {})), concurrency=cfg.get("concurrency"),
        choice=choice)


if __name__ == "__main__":
    main()
