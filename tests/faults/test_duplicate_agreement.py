"""What "duplicates agree" means in the fault suite: a redelivered record scored in another batch.

The real CPU kernels round differently for other batch shapes, so only the last float32 digit of
a duplicate's scores may differ; a different version, label, offset or a real score change must not.
"""

from __future__ import annotations

import numpy as np

from headrace.scorers.wire.encoding import json_predictions
from tests.faults.harness import predictions_agree


def _predict(scores: np.ndarray, *, version: int = 1, offset: int = 7) -> bytes:
    return json_predictions(
        keys=[b"k"], source_topic="t", partitions=np.array([0]), offsets=np.array([offset]),
        model_name="m", model_version=version, scores=scores[None, :].astype(np.float32),
        classes=["no", "yes"])[0]


def test_a_row_scored_in_two_batch_sizes_agrees_though_its_bytes_may_differ() -> None:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(2, activation="softmax")])
    forward = tf.function(lambda x: model(x, training=False),
                          input_signature=[tf.TensorSpec([None, 8], tf.float32)])
    x = np.random.default_rng(0).normal(size=(512, 8)).astype(np.float32)
    alone = [_predict(forward(x[:n]).numpy()[0]) for n in (1, 2, 3, 5, 256, 512)]
    assert all(predictions_agree([alone[0], other]) for other in alone[1:])


def test_duplicates_that_really_differ_do_not_agree() -> None:
    s = np.array([0.61508673, 0.38491333], np.float32)
    ulp = np.nextafter(s, np.float32(1))
    assert predictions_agree([_predict(s), _predict(ulp)])
    assert _predict(s) != _predict(ulp)
    assert not predictions_agree([_predict(s), _predict(s, version=2)])
    assert not predictions_agree([_predict(s), _predict(s[::-1].copy())])  # label flips
    assert not predictions_agree([_predict(s), _predict(s + np.float32(0.01))])
