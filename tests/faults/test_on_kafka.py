"""The fault suite's lineage kill -9 (a scorer SIGKILLed under load; the lineage index covers
exactly the predicted offsets) again on the 3-node Apache Kafka cluster (tests/on_kafka.py)."""

from __future__ import annotations

from tests.faults.conftest import needs_scorer
from tests.faults.test_lineage_kill9 import (  # noqa: F401 - collected here
    test_after_a_kill_9_the_index_covers_exactly_the_predicted_offsets,
)
from tests.on_kafka import broker, conn, pytestmark, replicated  # noqa: F401 - fixtures

pytestmark = [*pytestmark, needs_scorer]
