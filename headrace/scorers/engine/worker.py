"""The scoring loop: consume a micro-batch, decode, score, publish, then commit.

Commit protocol, at-least-once (default), per batch (batch k's acknowledgements are awaited
while batch k+1 is decoded and scored, so the broker round trip overlaps the CPU work):

1. Read the model once: the whole batch is scored by one version, named in every prediction.
2. Decode and validate column-wise; score the good rows; collect bad inputs as dead letters.
3. Produce every prediction and every dead letter; an input's Arrow predictions over the
   producer's ``message.max.bytes`` go as several parts (``splitting``).
4. Produce what the taps' second phase adds (``before_delivery``: a shadow candidate that ran
   while the batch was in flight), flush and check delivery errors; on a delivery error
   produce the batch's outputs again (duplicates are identical and carry their source
   offset), on a timeout keep flushing. An
   output refused for what it is (too large, invalid) is not produced again: its input is
   dead-lettered with the reason (``refusals``), so no producer error escapes the loop and a
   restart never meets that input again.
5. Only then commit the batch's offsets (last offset + 1 per partition).

With decode helpers (``decode_pool``), a big JSON batch is decoded in another process while the
previous one is scored and published: the loop consumes batch k+1 without blocking, collects
batch k's rows, hands k+1 to the helpers, then scores k. Batches are still scored, published and
committed in the order they were consumed; a batch decoded ahead is dropped if the consumer was
rewound meanwhile (it is consumed again), loses the partitions revoked meanwhile, and is decoded
again if the model's features changed.

Signature models (images, text, tensors) are decoded ahead the same way, in a thread instead of
the helper processes (Pillow and the model release the GIL): batch k+1 is decoded into the
model's inputs while batch k is in the model, with the same drop / revoke / swap rules (a swap
to another signature decodes the batch again).

Transactional mode replaces 4-5 with begin -> produce -> flush (holding the group) ->
send_offsets_to_transaction -> commit_transaction; an abortable error aborts, rewinds to the
committed offsets and lets the loop consume the batch again (confluent-kafka's eos-transactions
example); a commit that timed out is never retried: the producer is recreated, which settles
the old transaction, and then the consumer rewinds (``streams.transactions``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from headrace.contracts import RolloutRole
from headrace.core.errors import FatalError, PermanentError, RetriableError
from headrace.scorers.engine.batching import Batcher, rows_in
from headrace.scorers.engine.core import ScoringCore
from headrace.scorers.engine.metrics import ScorerMetrics
from headrace.scorers.engine.models import LoadedModel, ModelHolder
from headrace.scorers.engine.outputs import Outputs
from headrace.scorers.engine.roles import Routing, close_roles
from headrace.scorers.engine.stream_io import (
    CommitAbandoned,
    DeliveryFailed,
    FlushTimedOut,
    RawBatch,
    StreamIO,
    TransactionAborted,
)
from headrace.scorers.engine.taps import (
    Scored,
    SideOutput,
    Tap,
    close_taps,
    run_before_delivery,
    run_taps,
)
from headrace.scorers.wire import refusals, splitting
from headrace.scorers.wire.decode_pool import DecodePool
from headrace.scorers.wire.decoding import DecodedAhead, is_arrow_mask, tabular_row_bytes
from headrace.scorers.wire.encoding import ARROW_HEADERS, JSON_HEADERS
from headrace.scorers.wire.inputs import Decoded, InputLimits, decode_inputs, signature_bytes
from headrace.scorers.wire.output_formats import JsonPredictions, PredictionFormat
from headrace.scorers.wire.registry_records import REGISTRY_STAGE
from headrace.streams.dlq import DeadLetter
from headrace.streams.producing import Refused

log = logging.getLogger(__name__)

LAG_EVERY_S = 2.0
MAX_BACKOFF_S = 5.0
# How long a commit is retried. Past the consumer's max.poll.interval.ms (10 s) without a poll the
# member has left its group, and only polling brings it back: seen on Apache Kafka after the
# whole cluster restarted, a scorer retried "Waiting for coordinator" for ever, holding nothing.
COMMIT_PATIENCE_S = 10.0
# Decode ahead only when the scorer is behind (a batch at least half full) and the batch is big
# enough for a helper round trip to pay; a trickle is decoded at once, where latency comes first.
AHEAD_MIN_RECORDS = 1024
AHEAD_FLOOR = 128


@dataclass
class _Pending:
    """A published batch whose outputs are not yet all acknowledged, and not committed."""

    out: Outputs
    offsets: dict[tuple[str, int], int]
    messages: int
    started: float
    consumed_at: int | None  # the batch's: partitions taken away since commit nothing


@dataclass
class _Ahead:
    """A consumed batch whose JSON records the decode helpers are decoding."""

    batch: RawBatch
    arrow: np.ndarray  # is_arrow_mask(batch)
    features: tuple[str, ...]
    rewinds: int  # the consumer's rewinds when it was consumed
    revocations: int
    inputs: Future[Decoded] | None = None  # a signature model's batch, decoding in a thread
    revoked: set[tuple[str, int]] = field(default_factory=set)  # since it was consumed


def _log_stale(batch: RawBatch) -> None:
    log.info("dropped %d consumed messages: the consumer was rewound to the committed offsets "
             "and reads them again", len(batch))


class Worker:
    def __init__(
        self,
        *,
        io: StreamIO,
        holder: ModelHolder,
        metrics: ScorerMetrics,
        predictions_topic: str,
        dlq_topic: str,
        batch_size: int,
        max_wait_s: float,
        grace_s: float,
        transactional: bool,
        stop: threading.Event,
        decoders: DecodePool | None = None,
        limits: InputLimits | None = None,
        top_k: int | None = None,
        max_batch_bytes: int | None = None,
        taps: list[Tap] | None = None,
        routes: list[Routing] | None = None,
        on_retry: Callable[[str], object] | None = None,
        output: PredictionFormat | None = None,
    ) -> None:
        self.io = io
        self.output: PredictionFormat = output or JsonPredictions()
        # Told what the loop retries (a missing topic is created again: ``TopicKeeper``).
        self.on_retry = on_retry
        self.taps = list(taps or [])
        self.routes = list(routes or [])  # roles that split a batch between models (canary)
        self.holder = holder
        self.metrics = metrics
        self.predictions_topic = predictions_topic
        self.dlq_topic = dlq_topic
        self.grace_s = grace_s
        self.transactional = transactional
        self.stop = stop
        self.batcher = Batcher(io, max_rows=batch_size, max_wait_s=max_wait_s,
                               max_bytes=max_batch_bytes)
        self.batch_size = batch_size
        self.limits = limits or InputLimits()
        self.core = ScoringCore(limits=self.limits, top_k=top_k)  # decode + score + format
        self.ahead_min = min(AHEAD_MIN_RECORDS, batch_size // 2)
        self.last_progress = time.monotonic()  # the loop's last turn (an empty poll included)
        self.last_consumed: float | None = None  # the last batch with records: the stall check's
        # What the loop last retried, and when: the stall's reason names it (a broker refusing
        # writes, ISR under min.insync.replicas, says why nothing is consumed).
        self.last_retry: tuple[float, str] | None = None
        self._stop_seen: float | None = None
        self._next_lag = 0.0
        self._pending: _Pending | None = None
        self.commit_patience_s = COMMIT_PATIENCE_S
        self.decoders = decoders
        self._ahead: _Ahead | None = None
        self._revocations = 0
        self._held_revoked: set[tuple[str, int]] | None = None  # revoked during a hold
        self._inputs_thread: ThreadPoolExecutor | None = None  # signature decode-ahead
        # Taps' threads produce their side outputs early (``taps.SendSide``); the epoch moves
        # when what was produced may be lost (a renewed producer, a failed delivery).
        self._side_lock = threading.Lock()
        self._side_epoch = 0
        if not transactional:
            for tap in self.taps:
                bind = getattr(tap, "bind_sender", None)
                if bind is not None:
                    bind(self._send_side)

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.last_progress = time.monotonic()
                model = self.holder.current
                self.batcher.max_rows = (model.batch_rows if model is not None
                                         and model.batch_rows else self.batch_size)
                self.batcher.input_row_bytes = input_row_bytes(model)
                batch = self.batcher.next_batch(self.stop, block=self._ahead is None)
                if len(batch):  # an empty poll is no progress (ProbeState.stalled)
                    self.last_consumed = self.last_progress
                if self._ahead is not None:
                    self._finish_ahead(batch)
                elif len(batch):
                    if not self._decode_ahead(batch):
                        self.handle(batch)
                elif self._pending is not None:
                    self.complete_pending()  # idle: don't hold a finished batch's commit
                if time.monotonic() >= self._next_lag:
                    self._update_lag()
        finally:
            self._stop_seen = self._stop_seen or time.monotonic()
        if self._ahead is not None:
            self._finish_ahead(RawBatch.empty())
        self.complete_pending()
        close_taps(self.taps)
        close_roles(self.routes)
        if self._inputs_thread is not None:
            self._inputs_thread.shutdown(wait=False)

    def on_revoked(self, tps: list[tuple[str, int]]) -> None:
        """Partitions are being taken away: commit the batch in flight while they are ours;
        what was consumed of them and not scored yet is dropped (their next owner, maybe this
        member again, reads it from that commit)."""
        self.complete_pending()
        self._revocations += 1
        self.batcher.revoked(tps)
        if self._ahead is not None:
            self._ahead.revoked.update(tps)
        if self._held_revoked is not None:  # during a hold: the held batch loses them
            self._held_revoked.update(tps)

    def _decode_ahead(self, batch: RawBatch) -> bool:
        """Hand a big JSON batch's records to the decode helpers (a signature model's batch to
        the decode thread); False: score it now."""
        model = self.holder.current
        if model is not None and self._routing(model) is not None:
            return False  # each part is decoded for its own model
        if model is not None and not model.tabular:
            return self._decode_inputs_ahead(batch, model)
        if (self.decoders is None or model is None or not model.tabular
                or self.ahead_min < AHEAD_FLOOR
                or len(batch) < self.ahead_min):  # too few messages, let alone JSON ones
            return False
        arrow = is_arrow_mask(batch)
        idx = np.flatnonzero(~arrow)
        if len(idx) < self.ahead_min:
            return False
        registry = self.limits.registry
        if registry is not None and registry.wire_mask(batch.values).any():
            return False  # the helpers read JSON alone; wire records are decoded here
        values = batch.values if len(idx) == len(batch) else [batch.values[i]
                                                               for i in idx.tolist()]
        if not self.decoders.submit(values, model.features):
            return False
        self._ahead = _Ahead(batch, arrow, tuple(model.features), self.io.rewinds,
                             self._revocations)
        return True

    def _decode_inputs_ahead(self, batch: RawBatch, model: LoadedModel) -> bool:
        """A signature model's batch: decode it in a thread while the batch before is scored.
        Only when the scorer is behind (a batch at least half full, by rows or bytes)."""
        limit = self.batcher.max_bytes
        if rows_in(batch) * 2 < self.batcher.max_rows and not (
                limit and sum(map(len, batch.values)) * 2 >= limit):
            return False
        if self._inputs_thread is None:
            self._inputs_thread = ThreadPoolExecutor(1, thread_name_prefix="decode-ahead")
        job = self._inputs_thread.submit(decode_inputs, batch, model.signature, self.limits)
        self._ahead = _Ahead(batch, np.zeros(0, bool), (), self.io.rewinds, self._revocations,
                             job)
        return True

    def _finish_ahead(self, nxt: RawBatch) -> None:
        """Score the batch decoded ahead, once the next one is with the helpers (order kept)."""
        ahead, self._ahead = self._ahead, None
        assert ahead is not None
        rewinds = self.io.rewinds  # when ``nxt`` was consumed
        decoded: DecodedAhead | Decoded | None
        if ahead.inputs is not None:
            try:
                decoded = ahead.inputs.result()
            except RetriableError as exc:  # the scorer thread holds the stream until it passes
                log.warning("decoding ahead: %s; the batch is decoded again", exc)
                decoded = None
            except Exception:  # decoded again on the scorer thread, which reports it as before
                log.exception("decoding ahead failed; the batch is decoded again")
                decoded = None
        else:
            assert self.decoders is not None
            rows = self.decoders.result()
            decoded = None if rows is None else DecodedAhead(ahead.arrow, rows)
            if rows is None:  # a helper failed (it says why): this batch is decoded here instead
                self.metrics.retries.labels(stream=self.metrics.stream,
                                            what="decode_helper").inc()
        handed = len(nxt) > 0 and self._decode_ahead(nxt)
        batch = ahead.batch
        if self.io.rewinds != ahead.rewinds:
            _log_stale(batch)
        else:
            if self._revocations != ahead.revocations:
                batch, decoded = self.batcher.keep_owned(batch, ahead.revoked), None
            model = self.holder.current
            if isinstance(decoded, Decoded):
                if model is None or model.tabular or decoded.signature != model.signature:
                    decoded = None  # a swap changed the inputs: decode for the new model
            elif model is not None and (not model.tabular
                                        or tuple(model.features) != ahead.features):
                decoded = None  # a swap changed the inputs: decode for the new model
            if len(batch):
                if isinstance(decoded, Decoded):
                    self.metrics.decoded_ahead.inc(decoded.num_rows + len(decoded.bad))
                elif decoded is not None:
                    self.metrics.decoded_ahead.inc(len(decoded.json[1]) + len(decoded.json[2]))
                self.handle(batch, decoded)
        if len(nxt) and not handed:
            if self.io.rewinds != rewinds:  # rewound while the batch before it was delivered
                _log_stale(nxt)
            else:
                self.handle(nxt)

    def handle(self, batch: RawBatch, ahead: DecodedAhead | Decoded | None = None) -> None:
        """Build batch k+1 while batch k's outputs are being acknowledged, then commit k and
        publish k+1 (at-least-once); or run one transaction for the batch.

        ``ahead``: what the decode helpers made of the batch, if they did.
        """
        t0 = time.perf_counter()
        model = self.holder.current
        if model is None:  # never: the loop starts after the first model is loaded
            raise FatalError("no model loaded")
        if self._pending is not None:
            self._late_side(self._pending.out, wait=False)
        batch, out = self._score_holding(batch, model, ahead)
        out.received_ms = batch.received_ms
        offsets = batch.next_offsets()
        self._to_wire(out)
        if self.transactional:
            if self._deliver_transaction(out, offsets, batch.consumed_at):
                self._record(out, len(batch), t0)
            return
        self.complete_pending()
        self._produce(out)
        self._pending = _Pending(out, offsets, len(batch), t0, batch.consumed_at)

    def _to_wire(self, out: Outputs) -> None:
        """The batch's JSON predictions (and a canary's JSON parts) in the output format, once,
        after the taps have seen them. A registry that is away is retried with the partitions
        held (nothing dead-lettered, nothing committed); a schema it refuses stops the scorer."""
        if isinstance(self.output, JsonPredictions):
            return
        json_type = JSON_HEADERS[0]
        delay = 0.05
        while True:
            try:
                values = self.output.encode(out.json_values)
                parts = [p if json_type not in p.headers else splitting.Part(
                    self.output.encode([p.value])[0], p.key,
                    self.output.headers + [h for h in p.headers if h not in JSON_HEADERS])
                    for p in out.parts]
                break
            except RetriableError as exc:
                self._retrying("schema_registry", exc, delay, keep=self.io.hold)
                delay = min(delay * 2, MAX_BACKOFF_S)
            except PermanentError as exc:
                raise FatalError(f"the {self.output.name} predictions cannot be written: {exc}"
                                 ) from None
        out.json_values, out.parts = values, parts

    def _score_holding(self, batch: RawBatch, model: LoadedModel,
                       ahead: DecodedAhead | Decoded | None) -> tuple[RawBatch, Outputs]:
        """Score the batch; while decoding it cannot finish for now (a Schema Registry that
        does not answer), hold the partitions (nothing is consumed, nothing dead-lettered)
        and try again. Partitions revoked meanwhile leave the batch (their next owner reads
        them from the last commit): the batch that was scored, and its outputs."""
        delay = 0.05
        while True:
            try:
                route = self._routing(model)
                if route is not None:
                    return batch, route.handle(batch, model, self)
                out = self.core.score(batch, model, ahead)
                self.finish(batch, model, out, None)
                return batch, out
            except RetriableError as exc:
                self._held_revoked = set()
                try:
                    self._retrying("schema_registry" if exc.stage == REGISTRY_STAGE
                                   else "decode", exc, delay, keep=self.io.hold)
                finally:
                    revoked, self._held_revoked = self._held_revoked, None
                if revoked:
                    batch, ahead = self.batcher.keep_owned(batch, revoked), None
                delay = min(delay * 2, MAX_BACKOFF_S)

    def _routing(self, model: LoadedModel) -> Routing | None:
        """The role that splits this batch between models, if one does (a canary)."""
        for route in self.routes:
            if route.routing(model):
                return route
        return None

    def finish(self, batch: RawBatch, model: LoadedModel, out: Outputs,
               role: RolloutRole | None, *, within: tuple[RawBatch, np.ndarray] | None = None
               ) -> None:
        """A scored part of the batch (all of it, without a routing role): split its large
        outputs, run the taps (``role``: who scored it; None: production; ``within``: the
        whole batch and where the part's messages are in it)."""
        self._split(out, batch)
        if self.taps:
            whole, part = within if within is not None else (batch, None)
            run_taps(self.taps, Scored(whole, model, out, out.inputs, out.scores, role, part),
                     self.metrics)
        out.inputs, out.scores = None, []  # not kept while the batch is acknowledged

    def complete_pending(self) -> None:
        """Steps 4-5 for the batch in flight: every output acknowledged, then commit."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        self._late_side(pending.out)
        self._deliver(pending.out, pending.offsets, pending.consumed_at)
        self._record(pending.out, pending.messages, pending.started)

    def _record(self, out: Outputs, messages: int, started: float) -> None:
        now_ms = time.time() * 1000.0
        ts = out.row_timestamps_ms
        ts = ts[ts >= 0]
        self.metrics.latency.observe_many(np.maximum(now_ms - ts, 0.0) / 1000.0)
        if out.received_ms >= 0:  # split at receipt: waiting + scoring = the latency above
            got = np.maximum(ts, out.received_ms)
            self.metrics.waiting.observe_many(np.maximum(got - ts, 0.0) / 1000.0)
            self.metrics.scoring.observe_many(np.maximum(now_ms - got, 0.0) / 1000.0)
        self.metrics.rows.inc(out.scored_rows)
        self.metrics.messages.inc(messages)
        self.metrics.batch_rows.observe(out.scored_rows + len(out.letters))
        self.metrics.batch_seconds.observe(time.perf_counter() - started)
        for letter in out.letters:
            self.metrics.dead_letters.labels(stream=self.metrics.stream, stage=letter.stage).inc()
        if out.image_conversions:
            for conversion, n in out.image_conversions.items():
                self.metrics.image_conversions.labels(stream=self.metrics.stream,
                                                      conversion=conversion).inc(n)
            log.warning("images converted to the model's channels in this batch: %s",
                        out.image_conversions)
        self.last_progress = time.monotonic()

    # -- deliver -------------------------------------------------------------------------
    def _late_side(self, out: Outputs, *, wait: bool = True) -> None:
        """The taps' second phase (e.g. the shadow candidate, which ran while this batch was
        in flight): produce what they add before the batch is flushed and committed
        (``wait=False``: what is ready now, so it is acknowledged by the flush's time)."""
        if self.taps:
            start = run_before_delivery(self.taps, out, self.metrics, wait=wait)
            if len(out.side) > start:
                self._produce(out, side_from=start)

    def _send_side(self, side: SideOutput) -> list[SideOutput]:
        """``taps.SendSide``: produce ``side`` now (a tap's thread); the refused part is
        returned unsent, for ``_produce`` to handle at the batch's delivery."""
        with self._side_lock:
            gone = self.io.produce_many(side.topic, side.values, side.keys, side.headers)
            side.sent = self._side_epoch
        if not gone:
            return [side]
        values = {r.value for r in gone if r.value is not None}
        kept = SideOutput(side.topic, *refusals.without(side.values, side.keys, values),
                          side.headers, sent=side.sent)
        return [kept, SideOutput(side.topic, [r.value or b"" for r in gone],
                                 [r.key for r in gone], side.headers)]

    def _split(self, out: Outputs, batch: RawBatch) -> None:
        """Arrow predictions over the producer's limit become parts (``splitting``)."""
        out.batch = batch
        out.arrow_values, out.arrow_keys, out.parts = splitting.split_all(
            out.arrow_values, out.arrow_keys, ARROW_HEADERS, self.io.max_message_bytes)

    def _produce(self, out: Outputs, side_from: int | None = None) -> None:
        """Every output of the batch; ``side_from``: only the side outputs from there on."""
        topic = self.predictions_topic
        failed: list[tuple[Refused, list[tuple[str, bytes]]]] = []

        def send(topic: str, values: list[bytes], keys: list[bytes | None],
                 headers: list[tuple[str, bytes]]) -> None:
            failed.extend((r, headers) for r in self.io.produce_many(topic, values, keys,
                                                                      headers))

        if side_from is None:
            if out.json_values:
                send(topic, out.json_values, out.json_keys, self.output.headers)
            if out.arrow_values:
                send(topic, out.arrow_values, out.arrow_keys, ARROW_HEADERS)
            for part in out.parts:
                send(topic, [part.value], [part.key], part.headers)
            for letter in out.letters:
                send(self.dlq_topic, [letter.payload() or b""], [letter.record.key],
                     letter.headers())
        for side in out.side[side_from or 0:]:
            if side_from is None or side.sent != self._side_epoch:  # else produced already
                send(side.topic, side.values, side.keys, side.headers)
        delay = 0.05
        while failed:  # refused by the client at once: by what they are, or for now
            now, failed[:] = list(failed), []
            side_gone = self._side_refused(out, [r for r, _ in now if r.permanent])
            for letter in self._refused(out, [r for r, _ in now
                                              if r.permanent and id(r) not in side_gone]):
                send(self.dlq_topic, [letter.payload() or b""], [letter.record.key],
                     letter.headers())
            again = [(r, h) for r, h in now if not r.permanent]
            if again:
                self._retrying("produce", RetriableError(again[0][0].reason), delay)
                delay = min(delay * 2, MAX_BACKOFF_S)
                for r, h in again:
                    send(r.topic, [r.value or b""], [r.key], h)

    def _side_refused(self, out: Outputs, gone: list[Refused]) -> set[int]:
        """Drop refused tap outputs from ``out`` (never dead-lettered: the input was scored
        and published); the ids of those refusals."""
        side_topics = {s.topic for s in out.side}
        mine = [r for r in gone if r.topic in side_topics]
        for r in mine:
            self.metrics.side_refused.labels(stream=self.metrics.stream, topic=r.topic).inc()
            log.error("the producer refused a tap output of %d bytes for %s (%s); dropped",
                      len(r.value or b""), r.topic, r.reason)
        if mine:
            values = {r.value for r in mine if r.value is not None}
            out.side = [SideOutput(s.topic, *refusals.without(s.values, s.keys, values),
                                   s.headers) for s in out.side]
        return {id(r) for r in mine}

    def _refused(self, out: Outputs, gone: list[Refused]) -> list[DeadLetter]:
        """Take refused outputs out of ``out`` (they are never produced again) and dead-letter
        their inputs, once each; the new dead letters (also added to ``out``)."""
        lost = sum(r.topic != self.predictions_topic for r in gone)
        if lost:  # dead letters themselves: nowhere left to go (logged by take_out)
            self.metrics.dead_letters.labels(stream=self.metrics.stream,
                                             stage="refused").inc(lost)
        return refusals.take_out(out, gone, self.predictions_topic) if gone else []

    def _deliver(self, out: Outputs, offsets: dict[tuple[str, int], int],
                 consumed_at: int | None) -> None:
        try:
            self._deliver_held(out, offsets, consumed_at)
        finally:
            self.io.release()  # what waiting for the delivery paused (``StreamIO.flush``)

    def _deliver_held(self, out: Outputs, offsets: dict[tuple[str, int], int],
                      consumed_at: int | None) -> None:
        delay = 0.05
        while True:
            try:
                self.io.flush(self._flush_timeout())
                break
            except DeliveryFailed as exc:
                self._retrying("deliver", exc, delay, keep=self.io.hold)
                with self._side_lock:  # a tap's early outputs may be among the lost
                    self._side_epoch += 1
                side_gone = self._side_refused(out, exc.refused)
                # Never again; their inputs dead-lettered.
                self._refused(out, [r for r in exc.refused if id(r) not in side_gone])
                self._produce(out)  # some outputs are lost: publish the whole batch again
            except FlushTimedOut as exc:
                # A producer can hang on a broker that forgot it (UNKNOWN_PRODUCER_ID after a
                # restart): start a new one and publish the batch again (duplicates detectable).
                self._retrying("flush", exc, delay, keep=self.io.hold)
                with self._side_lock:
                    self._side_epoch += 1
                    self.io.renew_producer()
                self._produce(out)
            except RetriableError as exc:
                self._retrying("flush", exc, delay, keep=self.io.hold)
            delay = min(delay * 2, MAX_BACKOFF_S)
        delay = 0.05
        give_up = time.monotonic() + self.commit_patience_s
        while True:
            try:
                self.io.commit(offsets, consumed_at=consumed_at)
                break
            except CommitAbandoned as exc:
                # Polling rejoins the group; these partitions are consumed again (at-least-once).
                log.warning("%s; the batch will be consumed again", exc)
                self.io.rewind_to_committed()
                return
            except RetriableError as exc:
                if time.monotonic() >= give_up and not self.stop.is_set():
                    # Its outputs are delivered: the next batch's commit covers these offsets,
                    # or the partitions' next owner reads them again (at-least-once).
                    log.warning("%s for %.0fs; going back to polling (it rejoins the group) "
                                "without this commit", exc, self.commit_patience_s)
                    return
                self._retrying("commit", exc, delay, keep=self.io.hold)
                delay = min(delay * 2, MAX_BACKOFF_S)
        self.metrics.commits.inc()

    def _deliver_transaction(self, out: Outputs, offsets: dict[tuple[str, int], int],
                             consumed_at: int | None) -> bool:
        """True when committed; False when aborted (the consumer was rewound to redo it)."""
        try:
            self.io.begin()
            self._produce(out)
            self._late_side(out)
            self.io.commit_transaction(offsets, timeout_s=max(self._flush_timeout(), 5.0),
                                       consumed_at=consumed_at)
        except TransactionAborted as exc:
            self.metrics.retries.labels(stream=self.metrics.stream, what="transaction").inc()
            log.warning("%s; the batch will be consumed again", exc)
            return False
        self.metrics.commits.inc()
        return True

    def _flush_timeout(self) -> float:
        if self._stop_seen is None and self.stop.is_set():
            self._stop_seen = time.monotonic()
        if self._stop_seen is None:
            return 10.0  # long enough for any healthy flush; a hung producer is renewed after it
        return max(0.5, self.grace_s * 0.8 - (time.monotonic() - self._stop_seen))

    def _retrying(self, what: str, exc: Exception, delay: float,
                  keep: Callable[[], None] | None = None) -> None:
        """Count and log a retry, then wait ``delay`` (``keep``: called every second, so the
        consumer stays in its group through the wait)."""
        self.metrics.retries.labels(stream=self.metrics.stream, what=what).inc()
        if self.stop.is_set():
            if self._stop_seen is None:
                self._stop_seen = time.monotonic()
            if time.monotonic() - self._stop_seen > self.grace_s * 0.8:
                # Out of grace: exit without committing; the batch is consumed again later.
                raise FatalError(f"gave up on {what} at shutdown: {exc}") from None
        log.warning("%s failed (%s); retrying in %.2fs", what, exc, delay)
        self.last_retry = (time.monotonic(), f"{what} failed: {exc}")
        if self.on_retry is not None:
            self.on_retry(f"{what} failed: {exc}")
        self.last_progress = time.monotonic()  # still alive: retrying is progress
        end = time.monotonic() + delay
        while (left := end - time.monotonic()) > 0:
            if keep is not None:
                keep()
            time.sleep(min(left, 1.0))

    def _update_lag(self) -> None:
        self._next_lag = time.monotonic() + LAG_EVERY_S
        for (topic, partition), lag in self.io.lag().items():
            self.metrics.lag.labels(stream=self.metrics.stream, topic=topic,
                                    partition=str(partition)).set(lag)


def input_row_bytes(model: LoadedModel | None) -> int:
    """The model's decoded input per row, which the memory budget counts."""
    if model is None:
        return 0
    if model.tabular:
        return tabular_row_bytes(len(model.features))
    return signature_bytes(model.signature)
