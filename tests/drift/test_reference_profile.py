"""The profile the trainer writes (``trainers.drift_reference.build_profile``: inputs on the
training split through the summaries registry, the prediction on validation outputs, each group at
its share of the false-alarm rate) holds the rate on held-out rows window after window, and
catches a brightness shift in images and new words in text."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from headrace.contracts import ModelSpec
from headrace.drift.summaries import ProfiledInput, input_features, prediction_features
from headrace.drift.tracking import VersionTracker
from headrace.store import tokens
from headrace.store.signature import InputKind, ModelInput
from headrace.trainers.drift_reference import build_profile
from headrace.trainers.inputs import Inputs, InputStats, ModelPlan

WINDOW = 200
CLASSES = ("no", "yes")
SIGNATURE = (ModelInput(name="features", kind=InputKind.NUMERIC, columns=("a", "b", "c")),
             ModelInput(name="colour", kind=InputKind.CATEGORY, dtype="string"))


def _rows(rng: np.random.Generator, n: int) -> Inputs:
    x = np.stack([rng.normal(size=n), rng.gamma(2.0, size=n), rng.normal(5, 2, n)], axis=1)
    colour = rng.choice(np.array(["red", "green", "blue"], dtype=object), n, p=[0.5, 0.3, 0.2])
    return Inputs({"features": x.astype(np.float32), "colour": colour}, SIGNATURE)


def _model(x: Inputs) -> np.ndarray:
    """A fixed 'model': probabilities from a logistic function of the inputs."""
    f = x.columns["features"]
    z = f[:, 0] - 0.5 * f[:, 1] + (x.columns["colour"] == "red")
    p = 1 / (1 + np.exp(-z))
    return np.stack([1 - p, p], axis=1)


def _tracker(profile_inputs: Inputs, val: Inputs, plan: ModelPlan) -> VersionTracker:
    profile = build_profile(spec=ModelSpec(drift_window=WINDOW), plan=plan,
                            x_train=profile_inputs, val_outputs=_model(val), classes=CLASSES)
    assert profile is not None
    return VersionTracker(stream="s", model_name="m", model_version=1, scope="p0",
                          profile=profile)


def test_held_out_windows_alarm_within_the_configured_rate_prediction_included() -> None:
    rng = np.random.default_rng(21)
    plan = ModelPlan("mlp", SIGNATURE, (), 2)
    t = _tracker(_rows(rng, 4000), _rows(rng, 1000), plan)
    assert set(t.profile.features) == {"a", "b", "c", "colour", "prediction:class",
                                       "prediction:score"}
    assert abs(t.profile.calibration.false_alarm_rate - 0.01) < 1e-12  # the two shares add up
    windows, alarmed = 400, 0
    for _ in range(windows):
        x = _rows(rng, WINDOW)
        t.add({**input_features(t.profile.inputs, x.arrays()),
               **prediction_features(_model(x), CLASSES)}, np.zeros(WINDOW, np.int32),
              np.arange(WINDOW))
        events = t.close()
        alarmed += any(e.drifting for e in events)
    # 1% of 400 is 4 (binomial sd 2): more than 10 would be a rate well over the target.
    assert alarmed <= 10, alarmed


def _png(brightness: float, rng: np.random.Generator) -> bytes:
    px = np.clip(rng.normal(brightness, 30, (12, 12)), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(px, mode="L").save(buf, format="PNG")
    return buf.getvalue()


def test_a_brightness_shift_in_images_is_caught_and_named() -> None:
    rng = np.random.default_rng(22)
    sig = (ModelInput(name="image", kind=InputKind.IMAGE, dtype="float32", shape=(8, 8, 1),
                      height=8, width=8, channels=1),)
    plan = ModelPlan("cnn", sig, (), 2)

    def images(n: int, shift: float = 0.0) -> Inputs:
        blobs = np.array([_png(rng.normal(120, 25) + shift, rng) for _ in range(n)],
                         dtype=object)
        return Inputs({"image": blobs}, sig)

    train = images(800)
    profile = build_profile(spec=ModelSpec(drift_window=WINDOW), plan=plan, x_train=train,
                            val_outputs=np.full((40, 2), 0.5), classes=CLASSES)
    assert profile is not None
    assert {"image:brightness", "image:contrast"} <= set(profile.features)
    assert profile.inputs == (ProfiledInput(name="image", kind="image"),)
    t = VersionTracker(stream="s", model_name="m", model_version=1, scope="p0", profile=profile)
    fired = []
    for shift in (0.0, 30.0):
        live = images(WINDOW, shift)
        t.add(input_features(profile.inputs, live.arrays()), np.zeros(WINDOW, np.int32),
              np.arange(WINDOW))
        fired.append({e.feature for e in t.close() if e.drifting})
    assert fired == [set(), {"image:brightness"}]


def test_text_is_profiled_as_token_counts_and_unknown_share_and_new_words_drift() -> None:
    rng = np.random.default_rng(23)
    words = np.array(["the", "cat", "dog", "sat", "ran", "on", "mat", "far"], dtype=object)
    sig = (ModelInput(name="t", kind=InputKind.TEXT, dtype="string", max_length=32),)
    vocab = tuple(str(w) for w in words[:6])  # "mat" and "far" are rare and unknown
    plan = ModelPlan("text", sig, (), 2, stats={"t": InputStats(vocabulary=vocab)})

    def texts(n: int, new: float = 0.0) -> Inputs:
        out = []
        for _ in range(n):
            k = int(rng.integers(3, 9))
            w = rng.choice(words, k, p=[0.2, 0.15, 0.15, 0.15, 0.15, 0.1, 0.05, 0.05])
            w = [("zebra" if rng.random() < new else str(x)) for x in w]
            out.append(" ".join(w).upper() if rng.random() < 0.1 else " ".join(w))
        return Inputs({"t": np.array(out, dtype=object)}, sig)

    profile = build_profile(spec=ModelSpec(drift_window=WINDOW), plan=plan, x_train=texts(1500),
                            val_outputs=np.full((40, 2), 0.5), classes=CLASSES)
    assert profile is not None and profile.inputs[0].vocabulary == vocab
    assert {"t:tokens", "t:unknown"} <= set(profile.features)
    t = VersionTracker(stream="s", model_name="m", model_version=1, scope="p0", profile=profile)
    fired = []
    for new in (0.0, 0.3):
        t.add(input_features(profile.inputs, texts(WINDOW, new).arrays(),
                             tokenize=tokens.split_tokens), np.zeros(WINDOW, np.int32),
              np.arange(WINDOW))
        fired.append({e.feature for e in t.close() if e.drifting})
    assert fired == [set(), {"t:unknown"}]
