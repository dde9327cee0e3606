"""Drift state surviving a scorer restart (control.drift.state) again on the 3-node Apache Kafka
cluster (tests/on_kafka.py)."""

from __future__ import annotations

from tests.drift.test_drift_restart import (  # noqa: F401 - fixtures and the test, collected here
    data,
    stream,
    test_a_new_dominant_category_drifts_and_drift_state_survives_a_scorer_restart,
)
from tests.on_kafka import broker, conn, pytestmark, replicated  # noqa: F401 - fixtures
