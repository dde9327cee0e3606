"""Dead letters and replay again on the 3-node Apache Kafka cluster (tests/on_kafka.py): a
redrive moves each letter once, a cut dead letter fits Apache Kafka's default message size
(D61), a killed replay resumes without duplicating."""

from __future__ import annotations

from tests.on_kafka import broker, conn, pytestmark, replicated  # noqa: F401 - fixtures
from tests.ops.test_deadletters import (  # noqa: F401 - fixture and test, collected here
    stream,
    test_a_truncated_dead_letter_is_kept_with_its_hash_and_never_redriven,
    test_redrive_moves_each_letter_once_and_refuses_a_second_redrive,
)
from tests.ops.test_replay import (  # noqa: F401 - collected here
    test_killed_replay_resumes_without_duplicating,
)
