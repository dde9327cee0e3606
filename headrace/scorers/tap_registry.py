"""Imports every scorer tap module, so each registers its factory (``taps.register``).
One line per tap."""

import headrace.scorers.shadow_tap  # noqa: F401  (shadow scoring, live comparison)
from headrace.scorers import lineage_tap  # noqa: F401
