"""Batch taps: what else a scorer does with a batch once production has scored it.

A tap sees every scored batch (``Scored``: the consumed records, the model, the production
outputs, the decoded inputs and the raw model outputs, one row each) and may add side outputs
(``SideOutput``: records for another topic, e.g. shadow predictions or its own state) that the
scorer produces with the batch and flushes before it commits the batch's offsets, so a tap's
state is exactly as durable as the predictions. Drift windows, shadow scoring, live comparison
and the lineage index are taps.

Rules a tap keeps: it never changes the production outputs; whatever it raises is counted and
logged and the batch goes on (a tap never fails a production row); a refused side output is
dropped with a log line, never dead-lettered. ``Scored.inputs`` and ``Scored.scores`` may be
reused by the next batch: a tap copies what it keeps.

A tap may work in two phases: ``after_scoring`` starts work (e.g. the shadow candidate, in its
own thread) and ``before_delivery`` (optional), called just before the batch's outputs are
flushed and its offsets committed, adds what that work produced. The scorer publishes batch k
while it consumes and scores batch k+1, so such work overlaps production's instead of delaying
it. Taps without ``before_delivery`` add their side outputs in ``after_scoring``.

Taps are made by factories registered by name (``register``); the scorer builds every
registered tap for its stream and a factory returns None when its feature is off.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from headrace.scorers.engine.outputs import Outputs, SideOutput

if TYPE_CHECKING:
    from headrace.contracts import RolloutRole
    from headrace.core.settings import Settings
    from headrace.scorers.engine.metrics import ScorerMetrics
    from headrace.scorers.engine.models import LoadedModel
    from headrace.scorers.engine.settings import ScorerSettings
    from headrace.scorers.wire.decoding import Features
    from headrace.scorers.wire.inputs import Decoded
    from headrace.streams.clients import KafkaConnection
    from headrace.streams.consuming import RawBatch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Scored:
    """One batch as production scored it.

    ``inputs``: the decoded rows (``Features`` for a tabular model: ``x`` with the model's
    ``features`` as columns; ``Decoded`` for a signature model: ``arrays`` by input name), each
    row tied to its message (``inputs.message``, an index into ``batch``) and Arrow row;
    ``scores``: the model's outputs for those rows, in the same order (one array for a tabular
    model, one per output for a signature model). Rows the model failed on are not in either.
    """

    batch: RawBatch
    model: LoadedModel
    out: Outputs
    inputs: Features | Decoded | None
    scores: list[np.ndarray]
    role: RolloutRole | None = None  # None: production; CANARY for rows a canary scored
    # A canary scores a batch in two parts: then ``inputs`` index the part's messages and
    # ``part[i]`` is the index in ``batch`` of the part's message i (``messages`` maps them).
    part: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return len(self.scores[0]) if self.scores else 0

    def messages(self) -> np.ndarray:
        """The message (index in ``batch``) of each scored row."""
        if self.inputs is None:
            return np.zeros(0, np.int64)
        m = np.asarray(self.inputs.message, np.int64)
        return m if self.part is None else self.part[m]

    def add(self, side: SideOutput) -> None:
        self.out.side.append(side)


class Tap(Protocol):
    name: str

    def after_scoring(self, scored: Scored) -> None:
        """Observe a scored batch; may ``scored.add`` side outputs."""

    def close(self) -> None:
        """The scorer is stopping (the last batch is committed)."""


class DeliveringTap(Tap, Protocol):
    """A tap with a second phase (optional: the scorer looks for the method)."""

    def before_delivery(self, out: Outputs, wait: bool = True) -> None:
        """The batch that published ``out`` is about to be flushed and committed: add
        (``out.side``) the side outputs of the work ``after_scoring`` started for it.
        ``wait=False``: asked early (before the next batch is scored, so the outputs travel
        sooner), add only what is done already; nothing is ever added twice. A tap with
        ``bind_sender(send: SendSide)`` may produce what it adds from its own thread before
        this call (and must add it here all the same, ``sent``)."""


@dataclass(frozen=True)
class TapContext:
    """What a tap or role factory may use: the settings, the stream's scorer settings, the
    Kafka connection (to read its state back at start), the scorer's metrics registry, its stop
    event, and ``shared``: what the taps and roles of one scorer share (e.g. the rollout
    package's one follower of the stream's rollout state), made by the first that needs it."""

    settings: Settings
    scorer: ScorerSettings
    conn: KafkaConnection | None
    metrics: ScorerMetrics
    stop: threading.Event = field(default_factory=threading.Event)
    shared: dict[str, Any] = field(default_factory=dict)


TapFactory = Callable[[TapContext], "Tap | None"]

_FACTORIES: dict[str, TapFactory] = {}


def register(name: str, factory: TapFactory) -> None:
    """Make every scorer build ``factory``'s tap besides the listed ones (``tap_registry``); a
    name already listed is replaced."""
    _FACTORIES[name] = factory


def unregister(name: str) -> None:
    _FACTORIES.pop(name, None)


def registered() -> tuple[str, ...]:
    return tuple(_FACTORIES)


def build(context: TapContext, listed: Sequence[tuple[str, TapFactory]] = ()) -> list[Tap]:
    """The taps that are on for this scorer: the ``listed`` ones in order, then any
    registered."""
    factories = {**dict(listed), **_FACTORIES}
    taps: list[Tap] = []
    for name, factory in factories.items():
        tap = factory(context)
        if tap is not None:
            log.info("scorer tap on: %s", name)
            taps.append(tap)
    return taps


def run_taps(taps: list[Tap], scored: Scored, metrics: ScorerMetrics) -> None:
    """Every tap on the batch; a tap that raises loses its side outputs for this batch only."""
    for tap in taps:
        before = len(scored.out.side)
        try:
            tap.after_scoring(scored)
        except Exception:
            del scored.out.side[before:]
            metrics.tap_errors.labels(stream=metrics.stream, tap=tap.name).inc()
            log.exception("scorer tap %s failed on a batch; production is not affected",
                          tap.name)


def run_before_delivery(taps: list[Tap], out: Outputs, metrics: ScorerMetrics, *,
                        wait: bool = True) -> int:
    """Every tap's second phase on the batch about to be committed (``wait=False``: only what
    is done already); where the new side outputs start in ``out.side``. A tap that raises
    loses what it added this time only."""
    start = len(out.side)
    for tap in taps:
        finish = getattr(tap, "before_delivery", None)
        if finish is None:
            continue
        before = len(out.side)
        try:
            finish(out, wait)
        except Exception:
            del out.side[before:]
            metrics.tap_errors.labels(stream=metrics.stream, tap=tap.name).inc()
            log.exception("scorer tap %s failed before a batch's delivery; production is not "
                          "affected", tap.name)
    return start


def close_taps(taps: list[Tap]) -> None:
    for tap in taps:
        try:
            tap.close()
        except Exception:
            log.exception("scorer tap %s failed to close", tap.name)
