"""The scorer's routing roles (``roles``), one entry per role: an explicit list (no module
registers itself when imported)."""

from __future__ import annotations

from headrace.contracts import RolloutRole
from headrace.scorers.engine.roles import RoutingFactory
from headrace.scorers.rollout import canary

ROLES: tuple[tuple[str, RoutingFactory], ...] = (
    (RolloutRole.CANARY.value, canary.make_role),
)
