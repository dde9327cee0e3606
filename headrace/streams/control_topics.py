"""The control-plane topic names, optionally under a prefix (tests, several tenants on a cluster).

No Kafka client imports here: trainers and the CLI use these names freely.
"""

from __future__ import annotations

from dataclasses import dataclass

from headrace.core.naming import check_name
from headrace.streams import topics as t
from headrace.streams.topics import TopicSpec

_MONTH_MS = str(30 * 24 * 3600 * 1000)


@dataclass(frozen=True)
class ControlTopics:
    """Where the control plane reads and writes; ``prefix`` namespaces every name."""

    prefix: str = ""

    def _n(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    @property
    def train_requests(self) -> str:
        return self._n(t.TRAIN_REQUESTS)

    @property
    def train_requests_dlq(self) -> str:
        return self._n(t.TRAIN_REQUESTS_DLQ)

    @property
    def models(self) -> str:
        return self._n(t.MODEL_EVENTS)

    @property
    def jobs(self) -> str:
        return self._n(t.JOB_EVENTS)

    @property
    def schedules(self) -> str:
        return self._n(t.SCHEDULES)

    def data(self, stream: str) -> str:
        return self._n(t.data_topic(stream))

    def specs(self, *, data_streams: tuple[str, ...] = (), data_partitions: int = 1
              ) -> list[TopicSpec]:
        month = {"retention.ms": _MONTH_MS}
        specs = [
            TopicSpec(self.train_requests, 1, "TrainRequested events", month),
            TopicSpec(self.train_requests_dlq, 1, "unparseable train requests", month),
            TopicSpec(self.models, 1, "ModelPublished", month),
            TopicSpec(self.jobs, 1, "JobEvents", month),
            TopicSpec(self.schedules, 1, "last fired slot per schedule",
                      {"cleanup.policy": "compact"}),
        ]
        specs += [TopicSpec(self.data(s), data_partitions, f"records ({s})") for s in data_streams]
        return specs

    @classmethod
    def with_prefix(cls, prefix: str) -> ControlTopics:
        return cls(prefix=check_name(prefix, what="topic prefix") if prefix else "")
