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
batches scored before it is ready are not compared. A scorer that starts while a shadow is set
loads the candidate and reads its counts back before it scores, so a restart compares every
record it scores.
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

from headrace.contracts import LiveCounts, RolloutRole
from headrace.core.errors import HeadraceError
from headrace.scorers.budget import MessageCaps
from headrace.scorers.candidate import CandidateRun, classes_of, run_candidate
from headrace.scorers.candidates import CandidateLoader
from headrace.scorers.core import Outputs, ScoringCore
from headrace.scorers.encoding import ARROW_HEADERS, JSON_HEADERS
from headrace.scorers.inputs import InputLimits
from headrace.scorers.label_join import LabelJoin, follow_labels
from headrace.scorers.live_counts import BatchRows, LiveComparison, LiveCountsFollower, Pair
from headrace.scorers.models import LoadedModel, Sizing
from headrace.scorers.rollout_state import RolloutWatch
from headrace.scorers.shadow_metrics import ShadowMetrics
from headrace.scorers.taps import Scored, SideOutput, Tap, TapContext, register
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection, ensure_topics, partition_count
from headrace.streams.consuming import RawBatch
from headrace.streams.producing import send_events
from headrace.streams.topics import (
    ControlTopics,
    data_topic,
    labels_topic,
    shadow_spec,
    shadow_topic,
)

log = logging.getLogger(__name__)

LIVE_HEADERS = hdr.contract_headers(LiveCounts.SCHEMA, 1)
LOG_EVERY_S = 10.0


@dataclass
class _Started:
    """A batch production scored and the candidate's run on it, until the batch's delivery.
    Production's rows are kept (not ``Scored``, whose inputs the candidate alone needs)."""

    out: Outputs  # production's outputs: the batch is delivered when they are
    batch: RawBatch
    cand: LoadedModel
    comp: LiveComparison | None
    messages: np.ndarray  # per production row: its message in the batch
    rows: np.ndarray  # and its row inside the message
    scores: np.ndarray  # production's first output, one row each
    failed: list[tuple[int, int]]  # (partition, offset) of rows production's model failed on
    job: Future[tuple[CandidateRun, float]] | None
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
        self._late: Future[tuple[CandidateRun, float]] | None = None  # a run over its budget
        self.loader = CandidateLoader(root=ctx.settings.dfs_root, device=s.device,
                                      max_batch=s.batch_size,
                                      sizes=Sizing(max_batch_bytes=s.max_batch_bytes,
                                                   device_memory_mb=s.device_memory_mb),
                                      prepare=self.prepare)
        self._pairs: dict[tuple[int, int], LiveComparison] = {}
        self._maps: dict[tuple[int, int], np.ndarray] = {}
        self._logged: dict[str, float] = {}
        self.metrics = ShadowMetrics(ctx.metrics, lambda: list(self._pairs.values()),
                                     lambda: self.join.stats)

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

    # -- a batch -------------------------------------------------------------------------
    def after_scoring(self, scored: Scored) -> None:
        """Start the candidate on the batch (its own thread); ``before_delivery`` collects it."""
        version = self.wanted()
        if version is None:
            self.loader.drop()
            return
        cand = self.loader.want(self.model_name, version)
        if cand is None:
            return
        comp = self._pair(scored.model, cand)
        budget = (self.scorer.shadow_budget_ms / 1000.0
                  + self.scorer.shadow_budget_share * scored.out.score_s)
        job: Future[tuple[CandidateRun, float]] | None = None
        reason = "busy"
        if self._late is None or self._late.done():
            self._late, reason = None, ""
            job = self._pool.submit(_timed, self.core, cand, scored)
        pm = scored.messages()
        self._started.append(_Started(
            out=scored.out, batch=scored.batch, cand=cand, comp=comp, messages=pm,
            rows=(np.asarray(scored.inputs.row, np.int64) if scored.inputs is not None
                  else np.zeros(0, np.int64)),
            scores=(scored.scores[0].reshape(len(pm), -1) if scored.scores
                    else np.zeros((0, len(comp.classes) if comp else 0), np.float32)),
            failed=[(ltr.record.partition, ltr.record.offset) for ltr in scored.out.letters
                    if ltr.stage == "model"],
            job=job, reason=reason, budget=budget, started=time.perf_counter()))

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
        run, reason = self._collect(st) if st.job is not None else (None, st.reason)
        if run is not None:
            self._publish(out, run)
            self.metrics.rows.labels(stream=self.stream, candidate=cand.ref).inc(
                run.out.scored_rows)
            if run.decoded_again:
                self.metrics.decoded_again.inc()
            if run.nonfinite:
                self._dropped(cand, "nonfinite", run.nonfinite)
        elif len(st.messages):
            self._dropped(cand, reason, len(st.messages))
        if st.comp is not None:
            self._count(st.comp, st, run, out)

    def _collect(self, st: _Started) -> tuple[CandidateRun | None, str]:
        """The candidate's run on the batch, waited for at most what is left of the budget."""
        job = st.job
        assert job is not None
        t0 = time.perf_counter()
        try:
            run, took = job.result(timeout=max(0.0, st.started + st.budget - t0))
        except FutureTimeout:
            if not job.cancel():  # running: the next batches are "busy" until it ends
                self._late = job
            self._log("budget", "shadow %s over its budget of %.1f ms on a batch of %d rows; "
                      "dropped for the batch", st.cand.ref, st.budget * 1000,
                      len(st.messages))
            return None, "budget"
        except Exception as exc:
            self._log("error", "shadow %s failed on a batch (%s: %s); dropped for the batch",
                      st.cand.ref, type(exc).__name__, exc)
            return None, "error"
        finally:
            self.metrics.waited.observe(time.perf_counter() - t0)
        self.metrics.seconds.observe(took)
        return run, ""

    def _publish(self, out: Outputs, run: CandidateRun) -> None:
        got = run.out
        if got.json_values:
            out.side.append(SideOutput(self.topic, got.json_values, got.json_keys,
                                       JSON_HEADERS))
        if got.arrow_values:
            out.side.append(SideOutput(self.topic, got.arrow_values, got.arrow_keys,
                                       ARROW_HEADERS))

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

    def _count(self, comp: LiveComparison, st: _Started, run: CandidateRun | None,
               out: Outputs) -> None:
        """Pair the two versions' rows by (message, row), count them per partition, and add
        the snapshots of the changed partitions to the batch."""
        batch = st.batch
        if not len(batch):
            return
        pm, prow, ps = st.messages, st.rows, st.scores
        if run is not None and len(pm):
            if np.array_equal(pm, run.message) and np.array_equal(prow, run.row):
                ip = ic = np.arange(len(pm))  # the same rows (production's decoded inputs)
            else:
                _, ip, ic = np.intersect1d((pm << 32) | prow, (run.message << 32) | run.row,
                                           assume_unique=True, return_indices=True)
            cs = run.scores[ic]
            c_idx = self._maps[(comp.pair.production_version, comp.pair.candidate_version)][
                np.argmax(cs, axis=1)] if len(cs) else np.zeros(0, np.int64)
            c_conf = cs.max(axis=1) if len(cs) else np.zeros(0, np.float32)
        else:
            ip = np.zeros(0, np.int64)
            c_idx, c_conf = ip, np.zeros(0, np.float32)
        p_all = ps[ip]
        p_idx = np.argmax(p_all, axis=1) if len(p_all) else np.zeros(0, np.int64)
        p_conf = p_all.max(axis=1) if len(p_all) else np.zeros(0, np.float32)
        missing = np.ones(len(pm), bool)
        missing[ip] = False
        cmsg = pm[ip]
        parts, offs = batch.partitions, batch.offsets
        failed = st.failed
        for p in np.unique(parts).tolist():
            sel = parts[cmsg] == p
            miss = pm[missing][parts[pm[missing]] == p]
            rows = BatchRows(
                partition=p, end_offset=int(offs[parts == p].max()) + 1,
                offsets=offs[cmsg[sel]], production=p_idx[sel], candidate=c_idx[sel],
                production_confidence=p_conf[sel], candidate_confidence=c_conf[sel],
                candidate_missing_offsets=offs[miss],
                production_failed_offsets=np.asarray([o for q, o in failed if q == p],
                                                     np.int64))
            fresh = comp.add(rows)
            if self.join.active and fresh.any():
                msgs = cmsg[sel][fresh]
                self.join.predicted(comp, [batch.keys[i] for i in msgs.tolist()],
                                    np.full(len(msgs), p), rows.production[fresh],
                                    rows.candidate[fresh])
        snaps = comp.snapshots()
        if snaps:
            out.side.append(SideOutput(self.live_topic, [s.to_bytes() for s in snaps],
                                       [s.key() for s in snaps], LIVE_HEADERS))

    def _dropped(self, cand: LoadedModel, reason: str, rows: int) -> None:
        self.metrics.dropped.labels(stream=self.stream, candidate=cand.ref,
                                    reason=reason).inc(rows)

    def _log(self, what: str, msg: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._logged.get(what, -LOG_EVERY_S) >= LOG_EVERY_S:
            self._logged[what] = now
            log.warning(msg, *args)

    def close(self) -> None:
        """The last batch is committed: persist what labels joined since, then stop."""
        self.stop.set()
        snaps = [s for comp in self._pairs.values() for s in comp.snapshots()]
        if snaps:
            try:
                send_events(self.conn, self.live_topic, snaps,
                            key_of=lambda s: s.key().decode())
            except HeadraceError as exc:
                log.warning("could not persist the last live counts: %s", exc)
        self._pool.shutdown(wait=False)


def _timed(core: ScoringCore, cand: LoadedModel, scored: Scored
           ) -> tuple[CandidateRun, float]:
    t0 = time.perf_counter()
    run = run_candidate(core, cand, scored.model, scored.inputs, scored.batch, core.limits)
    return run, time.perf_counter() - t0


def make_shadow_tap(ctx: TapContext) -> Tap | None:
    """On for every scorer that follows a rollout; idle until a shadow is set. A scorer that
    starts during a shadow loads the candidate before it scores (a restart compares every
    record it scores)."""
    if ctx.rollout is None or ctx.conn is None:
        return None
    tap = ShadowTap(ctx, ctx.conn, ctx.rollout)
    version = tap.wanted()
    if version is not None:
        tap.loader.want(tap.model_name, version, wait=True)
    threading.Thread(target=tap.watch, name="shadow-watch", daemon=True).start()
    return tap


register("shadow", make_shadow_tap)
