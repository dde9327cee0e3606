"""Imports every scorer tap module, so each registers its factory (``taps.register``).
One line per tap."""

from headrace.scorers import lineage_tap  # noqa: F401
