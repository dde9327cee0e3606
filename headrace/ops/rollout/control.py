"""Set and clear a stream's rollout: the ``RolloutState`` every scorer of the stream follows on
the compacted ``control.rollout`` topic (keyed by stream, so the latest record wins and a
restarted scorer reads it back).

``publish_rollout`` is the one writer (shadow here, canary reuses it); ``start_shadow`` and
``stop_rollout`` check what they are asked for first, so a typo never reaches the scorers.
"""

from __future__ import annotations

from pathlib import Path

from headrace.contracts import RolloutRole, RolloutState
from headrace.core.errors import PermanentError, ValidationFailed
from headrace.core.naming import check_name
from headrace.store.versions import load_version
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.compacted import read_latest
from headrace.streams.producing import EventSink
from headrace.streams.topics import ControlTopics


def publish_rollout(conn: KafkaConnection, topics: ControlTopics, state: RolloutState
                    ) -> RolloutState:
    """Publish ``state`` on ``topics.rollout`` (key: the stream) and wait for the ack."""
    ensure_topics(conn, [s for s in topics.specs() if s.name == topics.rollout])
    sink = EventSink(conn)
    try:
        sink.send(topics.rollout, state, key=state.stream)
    finally:
        sink.close()
    return state


def parse_ref(ref: str) -> tuple[str, int]:
    """``NAME:VERSION`` to its parts; a one-line ``ValidationFailed`` otherwise."""
    name, sep, ver = ref.partition(":")
    if not sep or not ver.isdecimal() or int(ver) < 1:
        raise ValidationFailed(f"expected NAME:VERSION (e.g. demo:2), not {ref!r}")
    return check_name(name, what="model name"), int(ver)


def start_shadow(*, root: Path, conn: KafkaConnection, ref: str, stream: str | None = None,
                 topics: ControlTopics = ControlTopics(), reason: str = "") -> RolloutState:
    """Make every scorer of ``stream`` (default: the model's name) also run ``ref`` as a shadow.

    The version must exist and verify (every file's sha256): scorers would refuse it anyway,
    but silently, one log line per replica. A running canary is not replaced."""
    name, version = parse_ref(ref)
    stream = check_name(stream or name, what="stream name")
    load_version(root, name, version)  # VersionNotFound / IntegrityError: one line
    now = current_rollout(conn, stream, topics=topics)
    if now is not None and now.candidate_version is not None and now.role == RolloutRole.CANARY:
        raise PermanentError(f"stream {stream} runs a canary of {now.model_name}:"
                             f"{now.candidate_version}; stop it before starting a shadow")
    state = RolloutState(stream=stream, model_name=name, candidate_version=version,
                         role=RolloutRole.SHADOW, reason=reason or "shadow started")
    return publish_rollout(conn, topics, state)


def stop_rollout(*, conn: KafkaConnection, stream: str, model_name: str | None = None,
                 topics: ControlTopics = ControlTopics(), reason: str = "") -> RolloutState:
    """Clear the stream's rollout (a state with no candidate): scorers stop the candidate."""
    stream = check_name(stream, what="stream name")
    name = check_name(model_name or stream, what="model name")
    state = RolloutState(stream=stream, model_name=name, candidate_version=None, role=None,
                         reason=reason or "stopped")
    return publish_rollout(conn, topics, state)


def current_rollout(conn: KafkaConnection, stream: str, *,
                    topics: ControlTopics = ControlTopics()) -> RolloutState | None:
    """The stream's latest state on the topic (None: never set, or removed), read to its end;
    the rule every reader of the topic follows (``streams.compacted``)."""
    key = stream.encode()
    return read_latest(conn, topics.rollout, RolloutState, keep=lambda k: k == key).get(key)
