"""Publish a stream's ``RolloutState`` on the compacted ``control.rollout`` (keyed by stream):
what every scorer replica of the stream follows (``scorers.rollout_state.RolloutWatch``)."""

from __future__ import annotations

from headrace.contracts import RolloutState
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.producing import send_events
from headrace.streams.topics import ControlTopics


def publish_rollout(conn: KafkaConnection, topics: ControlTopics, state: RolloutState
                    ) -> RolloutState:
    """Publish ``state`` on ``topics.rollout`` (key: the stream) and wait for the ack."""
    ensure_topics(conn, [s for s in topics.specs() if s.name == topics.rollout])
    send_events(conn, topics.rollout, [state], key_of=lambda s: s.stream)
    return state
