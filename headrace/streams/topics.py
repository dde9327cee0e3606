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
DRIFT_EVENTS = "events.drift"  # compacted: DriftDetected per stream, model and feature
ROLLOUT = "control.rollout"  # compacted: RolloutState per stream
ROLLOUT_LIVE = "control.rollout.live"  # compacted: LiveCounts per pair and partition
DRIFT_STATE = "control.drift.state"  # compacted: each scorer's open drift window
LINEAGE = "control.lineage"  # compacted: LineageRange per scored offset range


def data_topic(stream: str) -> str:
    return f"data.{check_name(stream, what='stream name')}"


def predictions_topic(stream: str) -> str:
    return f"predictions.{check_name(stream, what='stream name')}"


def dlq_topic(stream: str) -> str:
    return f"data.{check_name(stream, what='stream name')}.dlq"


def shadow_topic(stream: str) -> str:
    """A shadow candidate's predictions (same format as ``predictions_topic``)."""
    return f"predictions.{check_name(stream, what='stream name')}.shadow"


def labels_topic(stream: str) -> str:
    """Truth that arrives after the records, keyed like them (live accuracy of a rollout)."""
    return f"labels.{check_name(stream, what='stream name')}"


def shadow_spec(stream: str, partitions: int) -> TopicSpec:
    return TopicSpec(shadow_topic(stream), partitions, f"shadow predictions ({stream})",
                     {"retention.ms": _WEEK_MS})


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
# The open range is re-published with every batch: roll segments often so compaction keeps the
# index near one record per range (a forward lineage query reads the whole topic).
_LINEAGE_CONFIG = {"cleanup.policy": "compact", "segment.ms": str(600_000),
                   "min.cleanable.dirty.ratio": "0.1"}


@dataclass(frozen=True)
class ControlTopics:
    """Where the control plane reads and writes; ``prefix`` namespaces every name (tests,
    several tenants on a cluster)."""

    prefix: str = ""

    def _n(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    @property
    def train_requests(self) -> str:
        return self._n(TRAIN_REQUESTS)

    @property
    def train_requests_dlq(self) -> str:
        return self._n(TRAIN_REQUESTS_DLQ)

    @property
    def models(self) -> str:
        return self._n(MODEL_EVENTS)

    @property
    def jobs(self) -> str:
        return self._n(JOB_EVENTS)

    @property
    def schedules(self) -> str:
        return self._n(SCHEDULES)

    @property
    def drift(self) -> str:
        return self._n(DRIFT_EVENTS)

    @property
    def drift_state(self) -> str:
        return self._n(DRIFT_STATE)

    @property
    def rollout(self) -> str:
        return self._n(ROLLOUT)

    @property
    def rollout_live(self) -> str:
        return self._n(ROLLOUT_LIVE)

    @property
    def lineage(self) -> str:
        return self._n(LINEAGE)

    def data(self, stream: str) -> str:
        return self._n(data_topic(stream))

    def specs(self, *, data_streams: tuple[str, ...] = (), data_partitions: int = 1
              ) -> list[TopicSpec]:
        month = {"retention.ms": _MONTH_MS}
        specs = [
            TopicSpec(self.train_requests, 1, "TrainRequested events (manual, schedule, rule)",
                      month),
            TopicSpec(self.train_requests_dlq, 1, "unparseable train requests with the reason",
                      month),
            TopicSpec(self.models, 1, "ModelPublished: promotions and rollbacks", month),
            TopicSpec(self.jobs, 1, "job lifecycle, progress, metrics and log lines", month),
            TopicSpec(self.schedules, 1, "last fired slot per schedule (compacted)",
                      {"cleanup.policy": "compact"}),
            TopicSpec(self.drift, 1, "DriftDetected per stream, model and feature (compacted)",
                      {"cleanup.policy": "compact"}),
            TopicSpec(self.drift_state, 1,
                      "each scorer's open drift window per model version (compacted)",
                      {"cleanup.policy": "compact"}),
            TopicSpec(self.rollout, 1, "shadow and canary candidates per stream (compacted)",
                      {"cleanup.policy": "compact"}),
            TopicSpec(self.rollout_live, 1,
                      "live production-vs-candidate counts per partition (compacted)",
                      {"cleanup.policy": "compact"}),
            TopicSpec(self.lineage, 1,
                      "offset ranges each model version scored, per partition (compacted)",
                      _LINEAGE_CONFIG),
        ]
        specs += [TopicSpec(self.data(s), data_partitions, f"records ({s})") for s in data_streams]
        return specs

    @classmethod
    def with_prefix(cls, prefix: str) -> ControlTopics:
        return cls(prefix=check_name(prefix, what="topic prefix") if prefix else "")

    @classmethod
    def of(cls, settings: Settings) -> ControlTopics:
        """The control topics of ``settings.topic_prefix`` (HEADRACE_TOPIC_PREFIX)."""
        return cls.with_prefix(settings.topic_prefix)


def catalog(settings: Settings) -> list[TopicSpec]:
    """Every topic for the configured streams, control-plane topics (under the settings'
    topic prefix) first."""
    specs = ControlTopics.of(settings).specs()
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
