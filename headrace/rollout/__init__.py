"""Rollout on the stream: which records a canary takes (``routing``) and how two model versions
compare on the same records (``tally``, the one live-count type, and ``comparison``). Framework- and Kafka-free, so the scorer that routes
and counts and the operator's commands that report share one definition."""
