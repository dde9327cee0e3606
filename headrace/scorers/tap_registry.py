"""Every scorer tap, registered by importing its module (one line per tap)."""

from headrace.scorers import drift_tap  # noqa: F401
