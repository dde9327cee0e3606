"""Rollout end to end again on the 3-node Apache Kafka cluster (tests/on_kafka.py): a canary's
salted routing across a restart and a rising percent, and the shadow's predictions and live
matrix against an offline recount."""

from __future__ import annotations

from tests.on_kafka import broker, conn, pytestmark, replicated  # noqa: F401 - fixtures
from tests.scorers.test_canary import (  # noqa: F401 - collected here
    test_predictions_follow_the_salted_routing_exactly_across_a_restart_and_a_rising_percent,
)
from tests.scorers.test_shadow import (  # noqa: F401 - collected here
    test_shadow_predictions_and_live_matrix_equal_an_offline_recount,
)
