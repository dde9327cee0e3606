"""Every scorer tap, registered by importing its module (one line per tap)."""

from headrace.scorers import shadow_tap  # noqa: F401  (shadow scoring, live comparison)
