"""Routing roles: rollout roles that decide which model scores each record of a batch (a canary
sends a salted-hash share of the keys to its candidate). A role that is not routing leaves the
batch to production; the worker asks its roles once per batch and has no branch per role.

A shadow is not a routing role: it scores every record a second time without changing what
production publishes, so it is a tap (``taps``).

Roles are made by factories, listed by role in ``role_registry`` (no module registers itself
when imported); the scorer builds every listed role for its stream, a factory returning None
when it has nothing to do on this scorer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from headrace.contracts import RolloutRole
    from headrace.scorers.engine.core import ScoringCore
    from headrace.scorers.engine.models import LoadedModel
    from headrace.scorers.engine.outputs import Outputs
    from headrace.scorers.engine.taps import TapContext
    from headrace.streams.consuming import RawBatch

log = logging.getLogger(__name__)


class Parts(Protocol):
    """What the worker lends a routing role for one batch."""

    @property
    def core(self) -> ScoringCore:
        """The worker's scoring core (production's; its settings for another model's core)."""

    def finish(self, batch: RawBatch, model: LoadedModel, out: Outputs,
               role: RolloutRole | None, *, within: tuple[RawBatch, np.ndarray] | None = None
               ) -> None:
        """A part of the batch is final: split its large outputs and run the taps on it
        (``role``: None for production). ``within``: the whole batch and the index in it of
        each message of ``batch``; the taps then see the whole batch (``Scored.part``)."""


class Routing(Protocol):
    name: str

    def routing(self, production: LoadedModel) -> bool:
        """True when the next batch is split between models (its candidate is loaded)."""

    def handle(self, batch: RawBatch, production: LoadedModel, parts: Parts) -> Outputs:
        """Score ``batch``, each record by the model it is routed to; every output of the
        batch, as the worker publishes it."""

    def close(self) -> None:
        """The scorer is stopping."""


RoutingFactory = Callable[["TapContext"], "Routing | None"]

def build(context: TapContext, listed: Sequence[tuple[str, RoutingFactory]]) -> list[Routing]:
    roles: list[Routing] = []
    for name, factory in listed:
        role = factory(context)
        if role is not None:
            log.info("scorer routing role on: %s", name)
            roles.append(role)
    return roles


def close_roles(roles: list[Routing]) -> None:
    for role in roles:
        try:
            role.close()
        except Exception:
            log.exception("routing role %s failed to close", role.name)
