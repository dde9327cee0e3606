"""The training control plane, in one package: train requests routed into jobs exactly once
(``plane``), schedules and event rules (``triggers``), and the foreground service that runs
them with the local executor (``service``).

Its Kafka side is the faust app ``app`` (with ``faust_kafka``, the only modules outside
``headrace.streams`` that import faust), which calls back into ``plane``; the topic names
are ``ControlTopics`` in the topic catalog (``headrace.streams.topics``).
"""

from headrace.trainers.control.plane import ControlPlane, Table, utcnow

__all__ = ["ControlPlane", "Table", "utcnow"]
