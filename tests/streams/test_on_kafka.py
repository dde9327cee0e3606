"""The transactional hold and stale-batch abort (D65, D66) again on the 3-node Apache Kafka
cluster (tests/on_kafka.py), where read_committed hides aborted outputs (Tansu's does not)."""

from __future__ import annotations

from tests.on_kafka import broker, conn, pytestmark, replicated  # noqa: F401 - fixtures
from tests.streams.test_transaction_hold import (  # noqa: F401 - collected here
    test_a_rebalance_served_while_the_transaction_flushes_aborts_it,
    test_a_transaction_waiting_on_its_outputs_keeps_its_consumer_in_the_group,
    test_a_transaction_with_a_partition_taken_away_after_it_was_consumed_is_aborted,
)
