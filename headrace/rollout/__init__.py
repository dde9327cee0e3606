"""Rollout on the stream: which records a canary takes (``routing``), what it does next
(``canary_steps``), and how two model versions compare on the same records (``tally``, the one
live-count type; ``comparison``, its statistics; ``evidence``, a stream's sum; ``live_gate``).
Framework- and Kafka-free, so the scorer that routes and counts and the operator's commands that
report share one definition."""
