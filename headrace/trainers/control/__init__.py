"""The training control plane, in one package: train requests routed into jobs exactly once
(``plane``), schedules and event rules (``triggers``), and the foreground service that runs
them with the local executor (``service``).

Its Kafka side is the faust app ``headrace.streams.control_app`` (only ``headrace.streams``
imports faust), which calls back into ``plane``; the topic names are ``ControlTopics`` in the
topic catalog (``headrace.streams.topics``).
"""

from headrace.trainers.control.plane import ControlPlane, Table, utcnow

__all__ = ["ControlPlane", "Table", "utcnow"]
