"""Imports every scorer tap module, so each registers its factory (``taps.register``).
One line per tap (kept apart, so each helper's line merges on its own)."""

# isort: off
from headrace.scorers import drift_tap  # noqa: F401
from headrace.scorers import shadow_tap  # noqa: F401  (shadow scoring, live comparison)
from headrace.scorers import lineage_tap  # noqa: F401
# isort: on
