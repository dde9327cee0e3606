"""Rollout, the operator's side: start, step and stop a shadow or a canary (``control``,
``canary``), read a stream's live evidence and apply the live gate (``live_evidence``), and
draw a comparison (``compare_png``). The framework-free core is ``headrace.rollout``; the
scorer's side is ``headrace.scorers.rollout``."""
