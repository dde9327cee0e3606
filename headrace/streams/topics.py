"""The topic catalog: every topic Headrace uses, with partitions and configs."""

from __future__ import annotations

from dataclasses import dataclass, field

from headrace.core.naming import check_name
from headrace.core.settings import Settings

TRAIN_REQUESTS = "events.train-requests"
TRAIN_REQUESTS_DLQ = "events.train-requests.dlq"
MODEL_EVENTS = "events.models"
JOB_EVENTS = "events.jobs"
SCHEDULES = "events.schedules"  # compacted: last fired slot per schedule


def data_topic(stream: str) -> str:
    return f"data.{check_name(stream, what='stream name')}"


def predictions_topic(stream: str) -> str:
    return f"predictions.{check_name(stream, what='stream name')}"


def dlq_topic(stream: str) -> str:
    return f"data.{check_name(stream, what='stream name')}.dlq"


def scorer_group(stream: str) -> str:
    return f"headrace-scorer.{check_name(stream, what='stream name')}"


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    purpose: str
    config: dict[str, str] = field(default_factory=dict)


_WEEK_MS = str(7 * 24 * 3600 * 1000)
_MONTH_MS = str(30 * 24 * 3600 * 1000)


def catalog(settings: Settings) -> list[TopicSpec]:
    """Every topic for the configured streams, control-plane topics first."""
    specs = [
        TopicSpec(TRAIN_REQUESTS, 1, "TrainRequested events (manual, schedule, rule)",
                  {"retention.ms": _MONTH_MS}),
        TopicSpec(TRAIN_REQUESTS_DLQ, 1, "unparseable train requests with the reason",
                  {"retention.ms": _MONTH_MS}),
        TopicSpec(MODEL_EVENTS, 1, "ModelPublished: promotions and rollbacks",
                  {"retention.ms": _MONTH_MS}),
        TopicSpec(JOB_EVENTS, 1, "job lifecycle, progress, metrics and log lines",
                  {"retention.ms": _MONTH_MS}),
        TopicSpec(SCHEDULES, 1, "last fired slot per schedule (compacted)",
                  {"cleanup.policy": "compact"}),
    ]
    for stream in settings.streams:
        specs += [
            TopicSpec(data_topic(stream), settings.partitions, f"records to score ({stream})",
                      {"retention.ms": _WEEK_MS}),
            TopicSpec(predictions_topic(stream), settings.partitions,
                      f"predictions ({stream})", {"retention.ms": _WEEK_MS}),
            TopicSpec(dlq_topic(stream), 1, f"dead letters ({stream})",
                      {"retention.ms": _MONTH_MS}),
        ]
    return specs
