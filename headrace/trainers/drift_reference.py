"""The drift reference a model version carries: ``drift_profile.json`` beside the model files
(hashed in the manifest like every file of the version).

The inputs are profiled on the training split (as ``drift.summaries`` summarises them, the same
functions the scorer runs on every batch) and the prediction on the validation split. Each group
is calibrated at its share of the false-alarm rate (by feature count), so the whole profile keeps
the configured rate per window. Cost is bounded: at most ``MAX_ROWS`` rows and ``MAX_FEATURES``
features are profiled.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from headrace.contracts import ModelSpec
from headrace.drift.fitting import PROFILE_FILE, DriftProfile, fit_profile, merge
from headrace.drift.summaries import ProfiledInput, input_features, prediction_features
from headrace.store import tokens
from headrace.trainers.inputs import Inputs, ModelPlan

log = logging.getLogger("headrace.job")  # the job's log (events.jobs)

MAX_ROWS = 20_000
MAX_FEATURES = 64
MIN_ROWS = 8  # fit_profile's least


def profiled_inputs(plan: ModelPlan) -> tuple[ProfiledInput, ...]:
    return tuple(ProfiledInput(name=i.name, kind=i.kind.value, columns=i.columns,
                               vocabulary=plan.stats[i.name].vocabulary
                               if i.name in plan.stats and i.kind.value == "text" else ())
                 for i in plan.inputs)


def _rows(x: Inputs, seed: int) -> Inputs:
    if len(x) <= MAX_ROWS:
        return x
    keep = np.sort(np.random.default_rng(seed).choice(len(x), MAX_ROWS, replace=False))
    return x[keep]


def _capped(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return dict(list(columns.items())[:MAX_FEATURES])


def build_profile(*, spec: ModelSpec, plan: ModelPlan, x_train: Inputs,
                  val_outputs: np.ndarray, classes: tuple[str, ...]) -> DriftProfile | None:
    """The profile, or None when there are too few rows to fit one."""
    inputs = profiled_inputs(plan)
    x = _rows(x_train, spec.seed)
    features = _capped(input_features(inputs, x.arrays(), tokenize=tokens.split_tokens))
    preds = prediction_features(val_outputs, classes)
    if not features or len(x) < MIN_ROWS:
        return None
    have_preds = bool(preds) and len(val_outputs) >= MIN_ROWS
    rate = spec.drift_false_alarm_rate
    share = len(features) / (len(features) + (len(preds) if have_preds else 0))
    profile = fit_profile(features, window=spec.drift_window, false_alarm_rate=rate * share,
                          seed=spec.seed)
    profile = profile.model_copy(update={"inputs": inputs, "classes": classes})
    if have_preds:
        profile = merge(profile, fit_profile(preds, window=spec.drift_window,
                                             false_alarm_rate=rate * (1 - share),
                                             seed=spec.seed))
    return profile


def write_profile(directory: Path, *, spec: ModelSpec, plan: ModelPlan, x_train: Inputs,
                  val_outputs: np.ndarray, classes: tuple[str, ...]) -> DriftProfile | None:
    """Fit and write ``drift_profile.json`` into a version's staging directory."""
    t0 = time.perf_counter()
    profile = build_profile(spec=spec, plan=plan, x_train=x_train, val_outputs=val_outputs,
                            classes=classes)
    if profile is None:
        log.info("drift profile skipped: fewer than %d rows", MIN_ROWS)
        return None
    (directory / PROFILE_FILE).write_text(profile.model_dump_json())
    log.info("drift profile: %d features, window %d, fitted in %.2fs",
             len(profile.features), profile.calibration.window, time.perf_counter() - t0)
    return profile
