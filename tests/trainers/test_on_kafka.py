"""The control plane's exactly-one-job test (two planes, a request delivered three times) again on
the 3-node Apache Kafka cluster (tests/on_kafka.py): faust's groups and tables on a real
coordinator."""

from __future__ import annotations

from tests.on_kafka import broker, conn, pytestmark, replicated  # noqa: F401 - fixtures
from tests.trainers.test_control_plane import (  # noqa: F401 - collected here
    test_two_control_planes_run_one_job_for_a_request_delivered_three_times,
)
