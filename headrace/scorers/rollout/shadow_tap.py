"""The shadow tap: while the stream's rollout is a SHADOW of this scorer's model, run the
candidate on every batch production scored, publish its predictions to
``predictions.<stream>.shadow`` and keep the live comparison (``live_counts``).

Production first, always. The candidate runs in its own thread, started when production has
scored the batch (``after_scoring``); its predictions and the batch's counts are added just
before the batch is flushed and committed (``before_delivery``). The scorer publishes batch k
while it consumes and scores batch k+1, so the candidate of k overlaps production's own work;
the scoring thread waits for it, there only, for what is left of the budget
(``shadow_budget_ms`` + ``shadow_budget_share`` x the time production took on the batch,
counted from the candidate's start). A candidate over the budget, still busy with an earlier
batch it overran, or raising is dropped for the batch (its rows counted as candidate errors, on
/metrics, logged); production's predictions are published and committed as if there were no
shadow.

The candidate reads production's decoded rows without a copy: the decoder's feature matrix
(``buffers.Scratch``) is lent again only once nothing references it, so the next batch is
decoded into fresh memory while the candidate still holds it.

The candidate is loaded as production is (every file's sha256 verified, warmed) in the
background when a shadow starts, by the canary's loader (``candidates.CandidateLoader``);
batches scored before it is ready are not compared (their rows are counted as dropped,
reason ``loading``; ``headrace_rollout_candidate`` says where the loading is). A scorer
that starts while a shadow is set loads the candidate and reads its counts back before it
scores, so a restart compares every record it scores.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

import numpy as np

from headrace.contracts import RolloutRole
from headrace.core.rate_limited_log import RateLimitedLog
from headrace.scorers.engine.core import ScoringCore
from headrace.scorers.engine.models import LoadedModel, Sizing
from headrace.scorers.engine.outputs import Outputs, SendSide, SideOutput
from headrace.scorers.engine.taps import Scored, Tap, TapContext
from headrace.scorers.rollout.candidate import CandidateRun, classes_of, run_candidate
from headrace.scorers.rollout.candidates import CandidateLoader, watch_loading
from headrace.scorers.rollout.label_join import LabelJoin, follow_labels
from headrace.scorers.rollout.live_counts import (
    LiveComparison,
    LiveCountsFollower,
    Pair,
    changed_counts,
    persist_last,
)
from headrace.scorers.rollout.shadow_metrics import ShadowMetrics
from headrace.scorers.rollout.shadow_rows import PartitionRows, Production, pair_rows
from headrace.scorers.rollout.state import RolloutWatch, watch_of
from headrace.scorers.wire.budget import MessageCaps
from headrace.scorers.wire.encoding import ARROW_HEADERS, JSON_HEADERS
from headrace.scorers.wire.inputs import InputLimits
from headrace.streams.clients import KafkaConnection, ensure_topics, partition_count
from headrace.streams.consuming import RawBatch
from headrace.streams.topics import (
    ControlTopics,
    data_topic,
    labels_topic,
    shadow_spec,
    shadow_topic,
)

log = logging.getLogger(__name__)

LOG_EVERY_S = 10.0


@dataclass(frozen=True)
class _Ran:
    """The candidate's run on a batch, the batch's rows prepared for the counts and the
    candidate's predictions as side outputs (produced already when the tap can send)."""

    run: CandidateRun
    rows: list[PartitionRows] | None  # None: the pair is not compared (a regressor)
    sides: list[SideOutput]
    seconds: float


@dataclass
class _Handoff:
    """Whether the candidate's thread may still produce the batch's predictions: not once
    production stopped waiting for them (the batch goes on without the candidate's rows)."""

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    abandoned: bool = False
    sent: bool = False


@dataclass
class _Started:
    """A batch production scored and the candidate's run on it, until the batch's delivery.
    Production's rows are kept (not ``Scored``, whose inputs the candidate alone needs)."""

    out: Outputs  # production's outputs: the batch is delivered when they are
    batch: RawBatch
    cand: LoadedModel
    comp: LiveComparison | None
    prod: Production  # production's rows, to pair with the candidate's
    job: Future[_Ran] | None
    handoff: _Handoff
    reason: str  # why there is no job
    budget: float
    started: float

    def done(self) -> bool:
        return self.job is None or self.job.done()


class ShadowTap:
    name = "shadow"

    def __init__(self, ctx: TapContext, conn: KafkaConnection, rollout: RolloutWatch) -> None:
        s = ctx.scorer
        self.conn, self.rollout, self.scorer = conn, rollout, s
        self.settings = ctx.settings
        self.stream, self.model_name = s.stream, s.model_name
        self.topic = shadow_topic(s.stream)
        self.live_topic = ControlTopics.of(ctx.settings).rollout_live
        self.limits = InputLimits(max_image_pixels=s.max_image_pixels,
                                  max_arrow_bytes=s.max_arrow_bytes,
                                  message=MessageCaps(max_rows=s.max_message_rows,
                                                      max_bytes=s.max_message_bytes))
        self.core = ScoringCore(limits=self.limits, top_k=s.top_k)
        self.join = LabelJoin(max_records=s.label_window_records, max_age_s=s.label_window_s)
        self.stop = threading.Event()
        self.follower: LiveCountsFollower | None = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="shadow")
        self._started: list[_Started] = []  # batches not yet delivered, oldest first
        self._late: Future[_Ran] | None = None  # a run over its budget
        self._send: SendSide | None = None  # the scorer's producer, for the candidate's thread
        self.loader = CandidateLoader(root=ctx.settings.dfs_root, device=s.device,
                                      max_batch=s.batch_size,
                                      sizes=Sizing(max_batch_bytes=s.max_batch_bytes,
                                                   device_memory_mb=s.device_memory_mb),
                                      prepare=self.prepare)
        self._pairs: dict[tuple[int, int], LiveComparison] = {}
        self._maps: dict[tuple[int, int], np.ndarray] = {}
        self._lines = RateLimitedLog(log, every_s=LOG_EVERY_S)
        self.metrics = ShadowMetrics(ctx.metrics, lambda: list(self._pairs.values()),
                                     lambda: self.join.stats)
        watch_loading(ctx, "shadow", self.loader)

    # -- the candidate -------------------------------------------------------------------
    def wanted(self) -> int | None:
        """The candidate version to shadow, if the rollout is a shadow of our model."""
        st = self.rollout.current
        if (st is None or st.role != RolloutRole.SHADOW or st.model_name != self.model_name
                or st.stream != self.stream):
            return None
        return st.candidate_version

    def prepare(self, name: str, version: int) -> None:
        """Before the loader loads the candidate (in its thread): make the shadow topic and
        read the counts back, so the candidate is there only once its counts are."""
        self._start_followers()
        spec = shadow_spec(self.stream, partition_count(self.conn, data_topic(self.stream))
                           or self.settings.partitions)
        ensure_topics(self.conn, [dataclasses.replace(
            spec, config={**spec.config, **self.settings.topic_config()})],
            replication_factor=self.settings.replication_factor)
        assert self.follower is not None
        if not self.follower.wait_caught_up(timeout_s=10.0):
            log.warning("%s not read to its end in 10s", self.live_topic)

    def _start_followers(self) -> None:
        if self.follower is not None:
            return
        self.follower = LiveCountsFollower(self.conn, self.live_topic, self.stream).start(
            self.stop)
        threading.Thread(target=follow_labels, args=(self.conn, labels_topic(self.stream),
                                                     self.join, self.stop),
                         name="labels", daemon=True).start()

    def watch(self) -> None:
        """Start loading a new candidate as soon as the rollout names it, not at the next
        batch (a thread, until the tap closes)."""
        while not self.stop.wait(0.5):
            version = self.wanted()
            if version is not None:
                self.loader.want(self.model_name, version)

    @property
    def candidate(self) -> LoadedModel | None:
        """The candidate loaded now, if any."""
        return self.loader.loaded

    def bind_sender(self, send: SendSide) -> None:
        """The candidate's thread produces its predictions as soon as they are made, so they
        travel while production scores the next batch (not at the batch's flush)."""
        self._send = send

    # -- a batch -------------------------------------------------------------------------
    def after_scoring(self, scored: Scored) -> None:
        """Start the candidate on the batch (its own thread); ``before_delivery`` collects it."""
        version = self.wanted()
        if version is None:
            self.loader.drop()
            return
        cand = self.loader.want(self.model_name, version)
        if cand is None:  # still loading (or refused): production's rows go uncompared
            rows = len(scored.messages())
            if rows:
                self.metrics.dropped.labels(stream=self.stream,
                                            candidate=f"{self.model_name}:{version}",
                                            reason="loading").inc(rows)
            return
        comp = self._pair(scored.model, cand)
        budget = (self.scorer.shadow_budget_ms / 1000.0
                  + self.scorer.shadow_budget_share * scored.out.score_s)
        pm = scored.messages()
        prod = Production(
            messages=pm,
            rows=(np.asarray(scored.inputs.row, np.int64) if scored.inputs is not None
                  else np.zeros(0, np.int64)),
            scores=(scored.scores[0].reshape(len(pm), -1) if scored.scores
                    else np.zeros((0, len(comp.classes) if comp else 0), np.float32)),
            failed=[(ltr.record.partition, ltr.record.offset) for ltr in scored.out.letters
                    if ltr.stage == "model"])
        job: Future[_Ran] | None = None
        handoff = _Handoff()
        reason = "busy"
        if self._late is None or self._late.done():
            self._late, reason = None, ""
            cmap = (self._maps[(comp.pair.production_version, comp.pair.candidate_version)]
                    if comp is not None else None)
            job = self._pool.submit(_timed, self.core, cand, scored, prod, cmap,
                                    self.join.active, self.topic, self._send, handoff)
        self._started.append(_Started(
            out=scored.out, batch=scored.batch, cand=cand, comp=comp, prod=prod,
            job=job, handoff=handoff, reason=reason, budget=budget,
            started=time.perf_counter()))

    def before_delivery(self, out: Outputs, wait: bool = True) -> None:
        """The batch that published ``out`` is about to be committed: add the candidate's
        predictions and the batch's counts (and those of any earlier batch still here);
        ``wait=False``: only runs already done, in order (the counts are added in order)."""
        last = max((i for i, st in enumerate(self._started) if st.out is out), default=-1)
        n = 0
        while n <= last and (wait or self._started[n].done()):
            n += 1
        todo, self._started = self._started[:n], self._started[n:]
        for st in todo:
            self._finish(st, out)

    def _finish(self, st: _Started, out: Outputs) -> None:
        cand = st.cand
        ran, reason = self._collect(st) if st.job is not None else (None, st.reason)
        run = ran.run if ran is not None else None
        if ran is not None and run is not None:
            out.side.extend(ran.sides)
            self.metrics.rows.labels(stream=self.stream, candidate=cand.ref).inc(
                run.out.scored_rows)
            if run.decoded_again:
                self.metrics.decoded_again.inc()
            if run.nonfinite:
                self._dropped(cand, "nonfinite", run.nonfinite)
        elif len(st.prod.messages):
            self._dropped(cand, reason, len(st.prod.messages))
        if st.comp is not None:
            self._count(st.comp, st, ran.rows if ran is not None else None, out)

    def _collect(self, st: _Started) -> tuple[_Ran | None, str]:
        """The candidate's run on the batch, waited for at most what is left of the budget."""
        job = st.job
        assert job is not None
        t0 = time.perf_counter()
        try:
            try:
                ran = job.result(timeout=max(0.0, st.started + st.budget - t0))
            except FutureTimeout:
                with st.handoff.lock:
                    st.handoff.abandoned = not st.handoff.sent
                if not st.handoff.sent:
                    raise
                ran = job.result()  # produced in time: the run only has to return
        except FutureTimeout:
            if not job.cancel():  # running: the next batches are "busy" until it ends
                self._late = job
            self._log("budget", "shadow %s over its budget of %.1f ms on a batch of %d rows; "
                      "dropped for the batch", st.cand.ref, st.budget * 1000,
                      len(st.prod.messages))
            return None, "budget"
        except Exception as exc:
            self._log("error", "shadow %s failed on a batch (%s: %s); dropped for the batch",
                      st.cand.ref, type(exc).__name__, exc)
            return None, "error"
        finally:
            self.metrics.waited.observe(time.perf_counter() - t0)
        self.metrics.seconds.observe(ran.seconds)
        return ran, ""

    def _pair(self, prod: LoadedModel, cand: LoadedModel) -> LiveComparison | None:
        key = (prod.version, cand.version)
        comp = self._pairs.get(key)
        if comp is not None:
            return comp
        pc, cc = classes_of(prod), classes_of(cand)
        if not pc or not cc:
            return None  # a regressor: its predictions are published, not compared
        classes = pc + tuple(c for c in cc if c not in pc)
        self._maps[key] = np.asarray([classes.index(c) for c in cc], np.int64)
        comp = LiveComparison(Pair(self.stream, self.model_name, prod.version, cand.version),
                              classes, self.follower)
        self._pairs[key] = comp
        return comp

    def _count(self, comp: LiveComparison, st: _Started, prepared: list[PartitionRows] | None,
               out: Outputs) -> None:
        """Count the batch's rows per partition (``prepared`` by the candidate's thread;
        None: the candidate did not run, every row is missing) and add the snapshots of the
        changed partitions to the batch."""
        batch = st.batch
        if prepared is None:
            prepared = pair_rows(batch, st.prod, None, keys=self.join.active)
        for part in prepared:
            fresh = comp.add(part.rows)
            if self.join.active and fresh.any():
                keys = part.keys if part.keys is not None and fresh.all() else [
                    batch.keys[i] for i in part.messages[fresh].tolist()]
                self.join.predicted(comp, keys, np.full(len(keys), part.rows.partition),
                                    part.rows.production[fresh], part.rows.candidate[fresh])
        changed = changed_counts(comp, self.live_topic)
        if changed is not None:
            out.side.append(changed)

    def _dropped(self, cand: LoadedModel, reason: str, rows: int) -> None:
        self.metrics.dropped.labels(stream=self.stream, candidate=cand.ref,
                                    reason=reason).inc(rows)

    def _log(self, what: str, msg: str, *args: object) -> None:
        self._lines.warning(what, msg, *args)

    def close(self) -> None:
        """The last batch is committed: persist what labels joined since, then stop."""
        self.stop.set()
        persist_last(self.conn, self.live_topic, self._pairs.values(), "the last live counts")
        self._pool.shutdown(wait=False)


def _timed(core: ScoringCore, cand: LoadedModel, scored: Scored, prod: Production,
           classes: np.ndarray | None, keys: bool, topic: str, send: SendSide | None,
           handoff: _Handoff) -> _Ran:
    """The candidate's run, and (``classes``: the pair is compared) the batch's rows paired
    for the counts, here in the candidate's thread rather than on the scoring thread; its
    predictions are produced here too (``send``) unless production stopped waiting."""
    t0 = time.perf_counter()
    run = run_candidate(core, cand, scored.model, scored.inputs, scored.batch, core.limits)
    rows = None if classes is None else pair_rows(scored.batch, prod, classes, run.message,
                                                  run.row, run.scores, keys=keys)
    got = run.out
    sides = []
    if got.json_values:
        sides.append(SideOutput(topic, got.json_values, got.json_keys, JSON_HEADERS))
    if got.arrow_values:
        sides.append(SideOutput(topic, got.arrow_values, got.arrow_keys, ARROW_HEADERS))
    if send is not None and sides:
        with handoff.lock:
            if not handoff.abandoned:
                sides = [part for side in sides for part in send(side)]
                handoff.sent = True
    return _Ran(run, rows, sides, time.perf_counter() - t0)


def make_shadow_tap(ctx: TapContext) -> Tap | None:
    """On for every scorer that follows a rollout; idle until a shadow is set. A scorer that
    starts during a shadow loads the candidate before it scores (a restart compares every
    record it scores)."""
    watch = watch_of(ctx)
    if watch is None or ctx.conn is None:
        return None
    tap = ShadowTap(ctx, ctx.conn, watch)
    version = tap.wanted()
    if version is not None:
        tap.loader.want(tap.model_name, version, wait=True)
    threading.Thread(target=tap.watch, name="shadow-watch", daemon=True).start()
    return tap
