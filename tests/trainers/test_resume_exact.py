"""Resuming from a checkpoint is bit-exact in every framework: k steps, a checkpoint, a fresh
model that loads it, and the remaining steps give the same weights as one uninterrupted run.
Adam's bias correction depends on the optimizer's update count: an MXNet checkpoint without
it restarted the count (weights off by up to 0.17 after resuming)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.contracts import ModelSpec
from headrace.trainers.backends import get_backend

SPEC = ModelSpec(hidden=(8,), learning_rate=0.05, batch_size=16)


def _weights(model: object) -> list[np.ndarray]:
    net = getattr(model, "net", None)
    if hasattr(net, "state_dict"):  # torch
        return [v.numpy() for v in net.state_dict().values()]  # type: ignore[union-attr]
    if net is not None:  # MXNet
        return [p.data().asnumpy() for p in net.collect_params().values()]
    return [np.asarray(w) for w in model.model.get_weights()]  # type: ignore[attr-defined]


@pytest.mark.parametrize("framework", ["mxnet", "tensorflow", "torch"])
def test_resume_from_a_checkpoint_gives_the_same_weights_as_an_uninterrupted_run(
        framework: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16 * 12, 4)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    batches = [(x[i:i + 16], y[i:i + 16]) for i in range(0, len(x), 16)]
    backend = get_backend(framework)
    # torch: with dropout, whose random stream the checkpoint holds too
    spec = SPEC.model_copy(update={"dropout": 0.3}) if framework == "torch" else SPEC

    def fresh() -> object:
        return backend.create(spec=spec, n_features=4, n_outputs=2, seed=7)

    whole = fresh()
    for xb, yb in batches:
        whole.fit_batch(xb, yb)  # type: ignore[attr-defined]

    first = fresh()
    for xb, yb in batches[:5]:
        first.fit_batch(xb, yb)  # type: ignore[attr-defined]
    ck = tmp_path / "ck"
    ck.mkdir()
    first.save_checkpoint(ck)  # type: ignore[attr-defined]
    resumed = fresh()
    resumed.load_checkpoint(ck)  # type: ignore[attr-defined]
    for xb, yb in batches[5:]:
        resumed.fit_batch(xb, yb)  # type: ignore[attr-defined]

    for a, b in zip(_weights(whole), _weights(resumed), strict=True):
        np.testing.assert_array_equal(a, b)
