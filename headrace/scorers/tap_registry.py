"""The scorer's taps, in the order they see each batch: an explicit list (no module registers
itself when imported). An embedder adds one with ``taps.register``."""

from __future__ import annotations

from headrace.scorers import drift_tap, lineage_tap
from headrace.scorers.engine.taps import TapFactory
from headrace.scorers.rollout import shadow_tap

TAPS: tuple[tuple[str, TapFactory], ...] = (
    (drift_tap.NAME, drift_tap.factory),
    ("shadow", shadow_tap.make_shadow_tap),  # shadow scoring, the live comparison
    ("lineage", lineage_tap.make),
)
