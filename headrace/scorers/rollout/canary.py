"""The canary routing role: a salted-hash share of the keys is scored by the candidate, in the
real predictions topic, and the canary steps forward, promotes or rolls back by itself.

Per batch, while the stream's ``RolloutState`` is a canary for this scorer's model and the
candidate is loaded (loaded in the background like a swap; until then production scores every
record):

1. Route each record: ``routing.candidate_mask`` of its key with the canary's salt (a record
   without a key by its ``topic:partition:offset``). Keyed BLAKE2b, not murmur2: it is keyed by
   the salt by design, in the standard library, and independent of both partitioners (CRC32 in
   librdkafka, murmur2 in Java clients), so every partition gets the same share. The decision
   depends on the key and the salt alone: a key stays on the candidate as the percent rises and
   across restarts and rebalances (the salt is in the state).
2. The candidate scores its records (its own scoring core: decoded for its own inputs). Records
   it fails on (a bad input for it, a raise, a non-finite score) are counted as candidate errors
   and scored by production in the same batch: never dead-lettered because of the candidate.
3. Production scores its records and those. Its errors among its own records are counted.
4. The counts decide (``rollout.canary_steps``): on rollback the candidate's records of THIS
   batch are scored by production too (the candidate's outputs are dropped before anything is
   produced) and the ended state is applied at once, so no later batch is routed to it.
5. The outputs merge into one batch: each input gets exactly one prediction on the predictions
   topic, naming its model version; the candidate's carry the header ``prediction.role:
   canary`` (production's carry none, as before). The taps see the whole batch once per part,
   with the part's role (``Scored.role``) and its messages (``Scored.part``).
6. With labels (``canary_labels``): each arm's published predictions wait for their labels;
   each arm's live accuracy (persisted per partition with the batch) feeds the decision of the
   next batch: ``min_labelled`` and ``max_accuracy_drop``.
"""

from __future__ import annotations

import logging

import numpy as np

from headrace.contracts import RolloutRole, RolloutState
from headrace.rollout import routing
from headrace.rollout.canary_steps import Decision, Labelled, Ledger, Verdict, judge
from headrace.scorers.engine.core import ScoringCore
from headrace.scorers.engine.models import LoadedModel, Sizing
from headrace.scorers.engine.outputs import Outputs
from headrace.scorers.engine.roles import Parts
from headrace.scorers.engine.taps import TapContext
from headrace.scorers.rollout.canary_labels import Arm, CanaryLabels, arm
from headrace.scorers.rollout.canary_metrics import CanaryMetrics
from headrace.scorers.rollout.canary_outcomes import CanaryOutcomes
from headrace.scorers.rollout.candidates import CandidateLoader, watch_loading
from headrace.scorers.rollout.label_join import LabelJoin
from headrace.scorers.rollout.live_counts import LiveComparison
from headrace.scorers.rollout.state import RolloutWatch, watch_of
from headrace.scorers.wire.encoding import ARROW_HEADERS, JSON_HEADERS
from headrace.scorers.wire.splitting import Part
from headrace.streams.consuming import RawBatch
from headrace.streams.topics import ControlTopics, labels_topic

log = logging.getLogger(__name__)

ROLE_HEADER = "prediction.role"
CANARY_HEADER = (ROLE_HEADER, RolloutRole.CANARY.value.encode())
# A candidate that fails a record again when its other records are scored again (it is not
# deterministic) gets this many tries before the rest of its records go to production.
CANDIDATE_PASSES = 3


def route(batch: RawBatch, salt: bytes, percent: float) -> np.ndarray:
    """Which messages of ``batch`` the candidate scores."""
    keys = batch.keys
    if None in keys:  # rare: only then are the coordinates looked at
        keys = [k if k is not None else routing.unkeyed(t, int(p), int(o))
                for k, t, p, o in zip(keys, batch.topics, batch.partitions.tolist(),
                                      batch.offsets.tolist(), strict=True)]
    return np.asarray(routing.candidate_mask(keys, salt, percent), bool)  # type: ignore[arg-type]


def failed_messages(batch: RawBatch, out: Outputs) -> np.ndarray:
    """Messages of ``batch`` with any dead letter in ``out`` (a row of an Arrow message, too)."""
    bad = np.zeros(len(batch), bool)
    if out.letters:
        where = {(int(p), int(o)): i for i, (p, o) in enumerate(
            zip(batch.partitions.tolist(), batch.offsets.tolist(), strict=True))}
        for letter in out.letters:
            i = where.get((int(letter.record.partition), int(letter.record.offset)))
            if i is not None:
                bad[i] = True
    return bad


def merge(into: Outputs, other: Outputs, *, headers: tuple[tuple[str, bytes], ...] = ()) -> None:
    """Add ``other``'s outputs to ``into``; with ``headers``, its predictions go as parts that
    carry them (a canary's)."""
    if headers:
        extra = list(headers)
        into.parts += [Part(v, k, JSON_HEADERS + extra)
                       for v, k in zip(other.json_values, other.json_keys, strict=True)]
        into.parts += [Part(v, k, ARROW_HEADERS + extra)
                       for v, k in zip(other.arrow_values, other.arrow_keys, strict=True)]
        into.parts += [Part(p.value, p.key, p.headers + extra) for p in other.parts]
    else:
        into.json_values += other.json_values
        into.json_keys += other.json_keys
        into.arrow_values += other.arrow_values
        into.arrow_keys += other.arrow_keys
        into.parts += other.parts
    into.letters += other.letters
    into.scored_rows += other.scored_rows
    into.row_timestamps_ms = np.concatenate([into.row_timestamps_ms, other.row_timestamps_ms])
    for conversion, n in other.image_conversions.items():
        into.image_conversions[conversion] = into.image_conversions.get(conversion, 0) + n
    into.side += other.side
    into.json_sources, into.arrow_messages = [], []  # they indexed the parts, not the batch


class CanaryRole:
    name = "canary"

    def __init__(self, *, model_name: str, watch: RolloutWatch, loader: CandidateLoader,
                 outcomes: CanaryOutcomes, metrics: CanaryMetrics | None = None,
                 labels: CanaryLabels | None = None) -> None:
        self.model_name = model_name
        self.labels = labels
        self.metrics = metrics
        self.watch = watch
        self.loader = loader
        self.outcomes = outcomes
        self.ledger: Ledger | None = None
        self._core: ScoringCore | None = None
        self._loaded: LoadedModel | None = None
        self._state: RolloutState | None = None  # as ``routing`` saw it for this batch

    # -- which batches -------------------------------------------------------------------
    def _canary(self, production: LoadedModel | None) -> RolloutState | None:
        st = self.watch.current
        if (st is None or st.role != RolloutRole.CANARY or st.canary is None
                or st.model_name != self.model_name or st.candidate_version is None
                or (production is not None and st.candidate_version == production.version)):
            return None
        return st

    def routing(self, production: LoadedModel) -> bool:
        st = self._canary(production)
        if st is None:
            if self._loaded is not None or self.ledger is not None:
                self.loader.drop()
                self._loaded, self.ledger = None, None
                if self.metrics is not None:
                    self.metrics.percent.set(0)
            return False
        assert st.candidate_version is not None
        self._state = st
        self._loaded = self.loader.want(st.model_name, st.candidate_version)
        if self._loaded is None and self.loader.failure is not None:
            self._decided(st, Decision(Verdict.ROLLBACK, self.loader.failure),
                          self._ledger(st), production)
        if self._loaded is not None and self.labels is not None and not self.labels.ready():
            return False  # its label counts are still being read back
        return self._loaded is not None

    def _ledger(self, st: RolloutState,
                labelled: tuple[Labelled, Labelled] | None = None) -> Ledger:
        assert st.canary is not None
        if self.ledger is None or self.ledger.salt != st.canary.salt:
            self.ledger = Ledger(st.canary.salt, st.canary.percent)
            if labelled is not None:
                self.ledger.labels(*labelled, new_step=True)
        self.ledger.follow(st.canary)
        return self.ledger

    def _end(self, state: RolloutState) -> None:
        self.watch.apply(state)  # this scorer's next batch follows it without waiting

    # -- one batch -----------------------------------------------------------------------
    def handle(self, batch: RawBatch, production: LoadedModel, parts: Parts) -> Outputs:
        st, cand = self._state, self._loaded
        assert st is not None and st.canary is not None and cand is not None
        comp = self.labels.comparison(production, cand) if self.labels is not None else None
        ledger = self._ledger(st, CanaryLabels.labelled(comp) if comp is not None else None)
        to_cand = route(batch, st.canary.salt.encode(), st.canary.percent)
        cand_batch = batch.select(to_cand)
        cand_out, cand_failed = self._score_candidate(cand_batch, cand, parts.core)
        kept = cand_batch.select(~cand_failed)
        kept_at = np.flatnonzero(to_cand)[~cand_failed]  # in the whole batch
        # Production: its own records and those the candidate failed on.
        fallback = np.zeros(len(batch), bool)
        fallback[np.flatnonzero(to_cand)[cand_failed]] = True
        scored_here = ~to_cand | fallback
        prod_batch = batch.select(scored_here)
        out = parts.core.score(prod_batch, production)
        own = ~to_cand[scored_here]  # production's own records, in prod_batch
        arms = self._arms(comp, out, scored_here, to_cand, cand_out, kept_at)
        prod_errors = int((failed_messages(prod_batch, out) & own).sum())
        if len(prod_batch):  # empty when every record of a small batch went to the candidate
            parts.finish(prod_batch, production, out, None,
                         within=(batch, np.flatnonzero(scored_here)))
        ledger.add(candidate=(len(cand_batch), int(cand_failed.sum())),
                   production=(int(own.sum()), prod_errors))
        if self.metrics is not None:
            self.metrics.percent.set(st.canary.percent)
            self.metrics.count("candidate", len(cand_batch), int(cand_failed.sum()))
            self.metrics.count("production", int(own.sum()), prod_errors)
        if comp is not None:
            ledger.labels(*CanaryLabels.labelled(comp))
        decision = judge(st.canary, ledger)
        if decision.verdict == Verdict.ROLLBACK:
            if len(kept):  # this batch's candidate records: production's predictions instead
                again = parts.core.score(kept, production)
                parts.finish(kept, production, again, None, within=(batch, kept_at))
                merge(out, again)
        elif len(kept):
            parts.finish(kept, cand, cand_out, RolloutRole.CANARY, within=(batch, kept_at))
            merge(out, cand_out, headers=(CANARY_HEADER,))
        out.batch = batch  # a refused output is traced back to its input in the whole batch
        if comp is not None and arms is not None and self.labels is not None:
            # What was published waits for its labels: on rollback, none of the candidate's.
            prod_arm, cand_arm = arms
            if decision.verdict == Verdict.ROLLBACK:
                cand_arm = Arm(cand_arm.messages[:0], cand_arm.classes[:0])
            self.labels.count(comp, batch, prod_arm, cand_arm, out)
        self._decided(st, decision, ledger, production)
        return out

    def _arms(self, comp: LiveComparison | None, out: Outputs, scored_here: np.ndarray,
              to_cand: np.ndarray, cand_out: Outputs, kept_at: np.ndarray
              ) -> tuple[Arm, Arm] | None:
        """Each arm's rows and predicted classes (production's own records only: those the
        candidate failed on are its errors), read before the outputs are finished."""
        if self.labels is None or comp is None:
            return None
        prod_map, cand_map = self.labels.maps(comp)
        p = arm(out, np.flatnonzero(scored_here), prod_map)
        own = ~to_cand[p.messages]
        return Arm(p.messages[own], p.classes[own]), arm(cand_out, kept_at, cand_map)

    def _score_candidate(self, batch: RawBatch, cand: LoadedModel,
                         production_core: ScoringCore) -> tuple[Outputs, np.ndarray]:
        """The candidate's outputs for the messages it scores without a failure, and which
        messages of ``batch`` it failed on."""
        if self._core is None:
            self._core = ScoringCore(limits=production_core.limits,
                                     top_k=production_core.top_k)
        failed = np.zeros(len(batch), bool)
        for _ in range(CANDIDATE_PASSES):
            left = np.flatnonzero(~failed)
            if not len(left):
                break
            part = batch if len(left) == len(batch) else batch.select(~failed)
            out = self._core.score(part, cand)
            bad = failed_messages(part, out)
            if not bad.any():
                return out, failed
            failed[left[bad]] = True
        return Outputs(), np.ones(len(batch), bool)  # whatever is left: production's

    def _decided(self, st: RolloutState, decision: Decision, ledger: Ledger,
                 production: LoadedModel) -> None:
        if decision.verdict == Verdict.HOLD:
            return
        if decision.verdict != Verdict.ROLLBACK and self.watch.current != st:
            return  # another replica moved the canary meanwhile: never publish an older step
        log.info("canary %s:%s: %s (%s)", st.model_name, st.candidate_version,
                 decision.verdict.value, decision.reason)
        if self.metrics is not None:
            self.metrics.decisions.labels(stream=st.stream, verdict=decision.verdict.value).inc()
        try:
            if decision.verdict == Verdict.ROLLBACK:
                self._end(self.outcomes.rollback(st, decision.reason, ledger,
                                                 production.version))
            elif decision.verdict == Verdict.PROMOTE:
                self._end(self.outcomes.promote(st, decision, ledger))
            else:
                self._end(self.outcomes.advance(st, decision, ledger))
        except Exception:
            # Not published: the next batch decides again. A rollback stops routing here
            # anyway, whatever the other replicas have heard.
            log.exception("publishing the canary's %s failed", decision.verdict.value)
            if decision.verdict == Verdict.ROLLBACK:
                self.watch.apply(RolloutState(stream=st.stream, model_name=st.model_name,
                                              reason=decision.reason))

    def close(self) -> None:
        self.outcomes.close()
        if self.labels is not None:
            self.labels.close()


def make_role(ctx: TapContext) -> CanaryRole | None:
    watch = watch_of(ctx)
    if watch is None or ctx.conn is None:
        return None
    s = ctx.scorer
    labels = CanaryLabels(conn=ctx.conn, live_topic=ControlTopics.of(ctx.settings).rollout_live,
                          labels_topic=labels_topic(s.stream), stream=s.stream,
                          model_name=s.model_name,
                          join=LabelJoin(max_records=s.label_window_records,
                                         max_age_s=s.label_window_s))
    role = CanaryRole(
        model_name=s.model_name, watch=watch,
        # The label counts are read back while the candidate loads (not after: routing would
        # wait for them with the candidate ready, and production score the first records).
        loader=CandidateLoader(root=ctx.settings.dfs_root, device=s.device,
                               max_batch=s.batch_size,
                               sizes=Sizing(max_batch_bytes=s.max_batch_bytes,
                                            device_memory_mb=s.device_memory_mb),
                               prepare=lambda _name, _version: labels.read_back()),
        outcomes=CanaryOutcomes(ctx.conn, ControlTopics.of(ctx.settings), ctx.settings.dfs_root),
        metrics=CanaryMetrics(ctx.metrics, labels.totals), labels=labels)
    watch_loading(ctx, "canary", role.loader)
    st = role._canary(None)
    if st is not None and st.candidate_version is not None:
        # A (re)started scorer routes from its first batch, as the replicas before it did, with
        # its label counts read back.
        assert role.labels is not None
        role.labels.start()
        role.loader.want(st.model_name, st.candidate_version, wait=True)
        if role.labels.follower is not None:
            role.labels.follower.wait_caught_up(timeout_s=10.0)
    return role
