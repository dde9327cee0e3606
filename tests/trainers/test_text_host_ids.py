"""Text ids are made by the text codec on the host, the same in training and in scoring: the
trainer's feed, the exported version's vocabulary file read by the TensorFlow scorer adapter,
and the MXNet feed give identical ids; the exported Keras model takes int32 ids (no string op),
so it loads and scores on Keras' JAX backend with TensorFlow's scores; a version of a newer
format than the scorer knows is refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from headrace.codecs import codec
from headrace.codecs import text as text_codec
from headrace.contracts import Framework, ModelSpec
from headrace.core.errors import PermanentError
from headrace.store import tokens
from headrace.store.manifest import FORMAT_VERSION, Manifest
from headrace.store.signature import InputKind, ModelOutput, OutputKind
from headrace.store.versions import publish
from headrace.trainers.inputs import ModelPlan, export_signature, learn_stats
from tests.store.test_tokens import UNICODE

TEXTS = ["the screen is not great", "great screen, not the battery", "Never failed!",
         "", "the the the", "screen great", *UNICODE]


def _plan(texts: list[str]) -> ModelPlan:
    from headrace.trainers.inputs import Inputs

    table = pa.table({"review": pa.array(texts, pa.string())})
    spec = ModelSpec(model="text", max_length=8)
    inp, values = codec(InputKind.TEXT).dataset_input(("review",), table, spec)
    x = Inputs({"review": values}, (inp,))
    outputs = (ModelOutput(name="label", kind=OutputKind.CLASSES, classes=("a", "b", "c")),)
    return ModelPlan("text", (inp,), outputs, 3, learn_stats(x, max_tokens=50))


def test_bigram_ids_follow_the_vocabulary_and_see_word_order() -> None:
    plan = _plan(TEXTS)
    (inp,) = plan.inputs
    vocab = plan.stats["review"].vocabulary
    ids = text_codec.token_ids(inp, np.array(TEXTS, object), vocab)
    assert ids.shape == (len(TEXTS), 24) and ids.dtype == np.int32
    words, pairs, lead = ids[:, :8], ids[:, 8:16], ids[:, 16:]
    assert (words < len(vocab) + 2).all()
    real = pairs[pairs > 0]
    assert (real > len(vocab) + 2).all() and (real < text_codec.id_count(inp, len(vocab))).all()
    # The empty text: one unknown token (a mean over its ids is never 0 / 0), no bigram.
    assert words[3][0] == tokens.OOV and (words[3][1:] == 0).all() and (pairs[3] == 0).all()
    assert (pairs[:, 7] == 0).all()  # the last token has no successor within max_length
    # "screen great" and "great screen": the same words, other bigrams.
    assert sorted(words[5][words[5] > 0]) == sorted(words[1][:2])
    assert pairs[5][0] != pairs[1][0]
    # Lead ids: the first third of each text's tokens again, after the bigrams' ids.
    after = len(vocab) + 2 + text_codec.BIGRAM_BUCKETS
    for row, n in ((0, 2), (1, 2), (2, 1), (3, 1), (4, 1), (5, 1)):  # ceil(tokens / 3)
        np.testing.assert_array_equal(lead[row][:n], words[row][:n] + after)
        assert (lead[row][n:] == 0).all()
    assert lead.max() < text_codec.id_count(inp, len(vocab))
    # MXNet is fed the very ids, as float32 (exact: far below 2**24).
    fed = codec(InputKind.TEXT).mxnet_feed(inp, np.array(TEXTS, object), vocab)
    np.testing.assert_array_equal(fed, ids.astype(np.float32))


def test_trainer_and_scorer_feed_the_same_ids_and_scores(tmp_path: Path) -> None:
    from headrace.codecs import feeds
    from headrace.scorers.adapters import tensorflow as tf_adapter
    from headrace.trainers.backends.tensorflow_keras import BACKEND, exported_feeders, plan_feeders

    plan = _plan(TEXTS * 3)
    model = BACKEND.create(spec=ModelSpec(model="text", max_length=8), n_features=0,
                           n_outputs=3, seed=1, plan=plan)
    assert model.model.inputs[0].dtype == "int32"  # no string reaches the graph
    model.export(tmp_path)
    (exported,) = export_signature(plan, Framework.TENSORFLOW)
    assert exported.vocabulary == "vocabulary-review.json"
    assert tokens.read_vocabulary(tmp_path / exported.vocabulary) == list(
        plan.stats["review"].vocabulary)
    texts = np.array(TEXTS, object)
    train_ids = plan_feeders(plan)["review"](texts)
    np.testing.assert_array_equal(exported_feeders(tmp_path, (exported,))["review"](texts),
                                  train_ids)
    feeder = feeds.keras_ids(exported, tmp_path)
    assert feeder is not None
    np.testing.assert_array_equal(feeder(texts), train_ids)

    # The scorer's adapter on the export scores as the trainer's model does.
    from headrace.trainers.inputs import Inputs

    want = model.predict(Inputs({"review": texts}, plan.inputs))
    manifest = Manifest(name="t", framework="tensorflow", task="classifier", features=(),
                        label="label", classes=("a", "b", "c"), inputs=(exported,),
                        outputs=plan.outputs, family="text")
    fn = tf_adapter.load_inputs(version_path=tmp_path, manifest=manifest, device="cpu",
                                max_batch=64)
    (got,) = fn({"review": texts})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.isfinite(got).all()  # the empty text too (a masked mean of nothing was NaN)
    np.save(tmp_path / "ids.npy", train_ids)
    np.save(tmp_path / "tf_scores.npy", want)


JAX_SCORES = """
import sys, numpy as np, keras
assert keras.backend.backend() == "jax"
m = keras.saving.load_model(sys.argv[1] + "/model.keras", compile=False)
ids = np.load(sys.argv[1] + "/ids.npy")
np.save(sys.argv[1] + "/jax_scores.npy", np.asarray(m.predict_on_batch(ids)))
"""


@pytest.mark.slow
def test_the_exported_text_model_scores_on_the_jax_backend(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    test_trainer_and_scorer_feed_the_same_ids_and_scores(tmp_path)
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "OMP_NUM_THREADS": "1",
           "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}
    done = subprocess.run([sys.executable, "-c", JAX_SCORES, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    np.testing.assert_allclose(np.load(tmp_path / "jax_scores.npy"),
                               np.load(tmp_path / "tf_scores.npy"), rtol=1e-4, atol=1e-5)


def test_a_version_of_a_newer_format_is_refused_in_one_line(tmp_path: Path) -> None:
    from headrace.scorers.engine.models import load_ref
    from tests.scorers import signature_models as sm

    newer = FORMAT_VERSION + 1
    m = sm._manifest("future", "tensorflow", (sm.TEXT,),
                     (ModelOutput(name="s", kind=OutputKind.CLASSES, classes=("a", "b")),),
                     family="text", format_version=newer)
    publish(tmp_path, m, lambda d: (d / "model.keras").write_bytes(b"not read"))
    with pytest.raises(PermanentError) as err:
        load_ref(root=tmp_path, ref="future:1", device="cpu", max_batch=8)
    assert str(err.value) == (f"future:1 has model format {newer}; this Headrace reads "
                              f"formats up to {FORMAT_VERSION}: upgrade the scorer")
    assert json.loads((tmp_path / "models" / "future" / "1" / "manifest.json").read_text()
                      )["format_version"] == newer
