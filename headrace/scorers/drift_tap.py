"""The scorer's live drift tap: every scored batch is counted into the served version's drift
window (``drift.tracking``), against the ``drift_profile.json`` that version carries.

Per batch: the inputs and predictions become drift features (``drift.summaries``, the functions
the trainer profiled with), are counted into fixed bins, and the window's state goes out as a
``DriftWindowState`` on ``control.drift.state`` (compacted). At a window close, one
``DriftDetected`` per feature that drifts or changed state goes to ``events.drift``. Both are
side outputs: produced before the batch's offsets are committed, so a restarted scorer reads its
last state back (at its first batch of a version with a profile) and resumes the open window
and each feature's run of drifting windows. A version without a profile is not tracked (logged
once).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping

import numpy as np
from prometheus_client import Counter, Gauge

from headrace.contracts import DriftDetected, DriftWindowState, parse
from headrace.contracts.base import utcnow
from headrace.core.bad_records import BadRecords
from headrace.drift.fitting import PROFILE_FILE, DriftProfile, ProfileError, load_profile
from headrace.drift.summaries import input_features, prediction_features
from headrace.drift.tracking import VersionTracker
from headrace.scorers.engine.models import LoadedModel
from headrace.scorers.engine.outputs import SideOutput
from headrace.scorers.engine.taps import Scored, TapContext
from headrace.scorers.wire.decoding import Features
from headrace.store import tokens
from headrace.store.dfs import model_dir
from headrace.streams.reading import iter_records
from headrace.streams.topics import ControlTopics

log = logging.getLogger(__name__)

NAME = "drift"


def scope_of(partitions: tuple[int, ...]) -> str:
    """Whose window: a scorer with static partitions owns theirs; one in a consumer group is
    known by its host (a StatefulSet pod keeps its name across restarts)."""
    return "p" + "-".join(map(str, partitions)) if partitions else socket.gethostname()


class DriftMetrics:
    def __init__(self, ctx: TapContext) -> None:
        r = ctx.metrics.registry
        self.stream = ctx.scorer.stream
        self.value = Gauge("headrace_scorer_drift_statistic",
                           "A drift statistic of the last closed window, per feature.",
                           ["stream", "model_version", "feature", "statistic"], registry=r)
        self.threshold = Gauge("headrace_scorer_drift_threshold",
                               "The calibrated threshold of a drift alarm test.",
                               ["stream", "model_version", "feature", "statistic"], registry=r)
        self.drifting = Gauge("headrace_scorer_drift_drifting",
                              "1 while a feature drifts (its last full window alarmed).",
                              ["stream", "model_version", "feature"], registry=r)
        self.windows = Counter("headrace_scorer_drift_windows", "Drift windows closed.",
                               ["stream", "full"], registry=r)
        self.alarms = Counter("headrace_scorer_drift_alarms",
                              "Features found drifting at a window close.",
                              ["stream", "feature"], registry=r)

    def closed(self, t: VersionTracker, *, full: bool) -> None:
        v = str(t.model_version)
        self.windows.labels(stream=self.stream, full=str(full).lower()).inc()
        for fd in t.last:
            for stat, value in fd.statistics.items():
                self.value.labels(self.stream, v, fd.feature, stat).set(value)
            for stat, thr in fd.thresholds.items():
                self.threshold.labels(self.stream, v, fd.feature, stat).set(thr)
            if full:
                drifting = t.drifting.get(fd.feature, False)
                self.drifting.labels(self.stream, v, fd.feature).set(int(drifting))
                if drifting:
                    self.alarms.labels(stream=self.stream, feature=fd.feature).inc()


class DriftTap:
    name = NAME

    def __init__(self, ctx: TapContext, *,
                 restored: Mapping[bytes, DriftWindowState] | None = None) -> None:
        self.ctx = ctx
        self.root = ctx.settings.dfs_root
        self.settings = ctx.scorer.drift
        self.time_bound_s = self.settings.window_seconds
        self.cap = self.settings.rows_per_batch
        self.rng = np.random.default_rng()
        self.scope = scope_of(ctx.scorer.partitions)
        topics = ControlTopics.of(ctx.settings)
        self.events_topic, self.state_topic = topics.drift, topics.drift_state
        # Read back when the first version with a profile is met (most have none: no wait).
        self.restored = None if restored is None else dict(restored)
        self.trackers: dict[tuple[str, int], VersionTracker | None] = {}
        self.metrics = DriftMetrics(ctx)

    def _tracker(self, model: LoadedModel) -> VersionTracker | None:
        key = (model.name, model.version)
        if key not in self.trackers:
            self.trackers[key] = self._start(model)
        return self.trackers[key]

    def _start(self, model: LoadedModel) -> VersionTracker | None:
        directory = model_dir(self.root, model.name) / str(model.version)
        try:
            profile = load_profile(directory, sha256=model.manifest.files.get(PROFILE_FILE))
        except ProfileError as exc:
            log.error("drift not tracked for %s: %s", model.ref, exc)
            return None
        if profile is None:
            log.info("drift not tracked for %s: the version has no %s", model.ref, PROFILE_FILE)
            return None
        cal, want = profile.calibration, self.settings
        if (want.window_records not in (None, cal.window)
                or want.false_alarm_rate not in (None, cal.false_alarm_rate)):
            log.warning("%s is calibrated for windows of %d records at a %g false-alarm rate; "
                        "HEADRACE_DRIFT_WINDOW_RECORDS/FALSE_ALARM_RATE (%s, %s) do not apply to "
                        "it (retrain with drift_window/drift_false_alarm_rate)", model.ref,
                        cal.window, cal.false_alarm_rate, want.window_records,
                        want.false_alarm_rate)
        t = VersionTracker(stream=self.ctx.scorer.stream, model_name=model.name,
                           model_version=model.version, scope=self.scope, profile=profile)
        if self.restored is None:
            self.restored = read_states(self.ctx, self.scope)
        state = self.restored.pop(t.state().key(), None)
        if state is not None:
            try:
                t.resume(state)
                log.info("drift window of %s resumed: window %d, %d records", model.ref,
                         state.window, state.rows)
            except ValueError as exc:
                log.warning("drift state of %s not resumed: %s", model.ref, exc)
        log.info("tracking drift of %s: %d features, windows of %d records", model.ref,
                 len(profile.features), profile.calibration.window)
        return t

    def after_scoring(self, scored: Scored) -> None:
        t = self._tracker(scored.model)
        if t is None or scored.rows == 0:
            return
        msgs = scored.messages()
        keep = sample(scored.rows, self.cap, self.rng)
        t.add(features_of(scored, t.profile, keep), scored.batch.partitions[msgs],
              scored.batch.offsets[msgs])
        events: list[DriftDetected] = []
        now = utcnow()
        if t.due(now=now, time_bound_s=self.time_bound_s):
            full = t.window.full
            events = t.close(now=now)
            self.metrics.closed(t, full=full)
        if events:
            scored.add(SideOutput(self.events_topic, [e.to_bytes() for e in events],
                                  [e.key() for e in events]))
        state = t.state()
        scored.add(SideOutput(self.state_topic, [state.to_bytes()], [state.key()]))

    def close(self) -> None:
        pass


def sample(rows: int, cap: int, rng: np.random.Generator) -> slice:
    """The rows of a batch the window counts: all, or every k-th from a random start so that
    at most ``cap`` are (a systematic sample: its statistics are those of the stream)."""
    if rows <= cap:
        return slice(None)
    step = -(-rows // cap)
    return slice(int(rng.integers(step)), None, step)


def features_of(scored: Scored, profile: DriftProfile, keep: slice = slice(None)
                ) -> dict[str, np.ndarray]:
    """A scored batch's drift features (of the rows ``keep``): its inputs as the profile
    summarises them, and its predictions."""
    inputs = scored.inputs
    arrays: dict[str, np.ndarray]
    if isinstance(inputs, Features):  # a tabular model: its one input is the feature matrix
        only = profile.inputs[0] if len(profile.inputs) == 1 else None
        arrays = {only.name: inputs.x[keep]} if only is not None else {}
    elif inputs is not None:
        arrays = {k: v[keep] for k, v in inputs.arrays.items()}
    else:
        arrays = {}
    out = input_features(profile.inputs, arrays, tokenize=tokens.split_tokens)
    if scored.scores:
        out.update(prediction_features(scored.scores[0][keep],
                                       profile.classes or scored.model.classes))
    return out


def read_states(ctx: TapContext, scope: str) -> dict[bytes, DriftWindowState]:
    """The latest window state of each version this scorer (stream and scope) tracked."""
    if ctx.conn is None:
        return {}
    topic = ControlTopics.of(ctx.settings).drift_state
    prefix = f"{ctx.scorer.stream}|".encode()
    suffix = f"|{scope}".encode()
    out: dict[bytes, DriftWindowState] = {}
    bad = BadRecords(log, f"drift window state on {topic}")
    for rec in iter_records(ctx.conn, topic, idle_s=0.5):
        if rec.key is None or not rec.key.startswith(prefix) or not rec.key.endswith(suffix):
            continue
        if not rec.value:
            out.pop(rec.key, None)
            continue
        try:
            out[rec.key] = parse(DriftWindowState, rec.value)
        except Exception as exc:  # whatever the bytes: the scorer starts all the same
            bad.skip(f"{rec.topic}/{rec.partition}@{rec.offset}", exc)
    return out


def factory(ctx: TapContext) -> DriftTap | None:
    if not ctx.scorer.drift.enabled:
        return None
    return DriftTap(ctx)
