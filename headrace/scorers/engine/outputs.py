"""What one scored batch publishes: ``Outputs`` (predictions, dead letters, and the taps'
``SideOutput``s). Its own module so that the scoring core, which fills it, and the taps, which
add to it, both depend on it and not on each other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from headrace.scorers.wire import splitting
from headrace.scorers.wire.decoding import Features
from headrace.scorers.wire.inputs import Decoded
from headrace.streams.consuming import RawBatch
from headrace.streams.dlq import DeadLetter


@dataclass
class SideOutput:
    """Records a tap publishes with the batch (before the batch's offsets are committed)."""

    topic: str
    values: list[bytes]
    keys: list[bytes | None]
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    # Produced already, from the tap's own thread (``SendSide``), in this epoch of the
    # scorer's producer; None: the scorer produces it with the batch. One sent in an older
    # epoch (a producer renewed, a delivery failed since) is produced again.
    sent: int | None = None


SendSide = Callable[[SideOutput], list[SideOutput]]
"""Produce a side output now, from a tap's thread, so it travels before its batch's flush;
what comes back goes in ``out.side`` (marked ``sent``, plus any refused part, unsent, which
the scorer handles at delivery as its own refusals). The scorer gives one to a tap that has
``bind_sender`` (never in transactional mode, where outputs go in the batch's transaction)."""


@dataclass
class Outputs:
    """Everything one batch publishes."""

    json_values: list[bytes] = field(default_factory=list)
    json_keys: list[bytes | None] = field(default_factory=list)
    arrow_values: list[bytes] = field(default_factory=list)
    arrow_keys: list[bytes | None] = field(default_factory=list)
    letters: list[DeadLetter] = field(default_factory=list)
    parts: list[splitting.Part] = field(default_factory=list)  # split Arrow predictions
    batch: RawBatch | None = None  # the inputs, to dead-letter one whose output is refused
    scored_rows: int = 0
    row_timestamps_ms: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    received_ms: float = -1.0  # when the scorer consumed the batch (RawBatch.received_ms)
    image_conversions: dict[str, int] = field(default_factory=dict)
    # The message (index in the batch) each output came from: one per JSON value, one per Arrow
    # value (re-scoring writes each next to its source record).
    json_sources: list[np.ndarray] = field(default_factory=list)
    arrow_messages: list[int] = field(default_factory=list)
    # For the taps (``taps.Scored``): the decoded rows and the model's raw outputs, one row
    # each, and what the taps publish with the batch.
    inputs: Features | Decoded | None = None
    scores: list[np.ndarray] = field(default_factory=list)
    side: list[SideOutput] = field(default_factory=list)
    score_s: float = 0.0  # decode + model + format: a shadow's budget is a share of it

    def json_messages(self) -> np.ndarray:
        """The message each JSON value came from, in ``json_values`` order."""
        if not self.json_sources:
            return np.zeros(0, np.int64)
        return np.concatenate(self.json_sources).astype(np.int64, copy=False)

