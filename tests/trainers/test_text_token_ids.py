"""TensorFlow and MXNet text models read text alike: trained by real jobs on the same sentences
(with Unicode spaces, full-width forms, accents, emoji and right-to-left text), both versions
ship the same vocabulary file and their inputs, fed by the text codec as both scorer adapters
feed them, get the same ids for every string of the Unicode corpus; the TensorFlow model takes
them as int32 (no TextVectorization left in its graph)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa

from headrace.codecs import codec
from headrace.codecs import text as text_codec
from headrace.contracts import ModelSpec, TrainRequested
from headrace.store import tokens, versions
from headrace.trainers import jobs
from headrace.trainers.dataset_files import put_dataset
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.job_process import run_job
from tests.store.test_tokens import UNICODE

MAX_LENGTH = 12


def _train(dfs: Path, uri: str, framework: str) -> versions.ModelVersion:
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name=f"t-{framework}",
                         framework=framework, dataset_uri=uri,
                         spec=ModelSpec(model="text", epochs=1, batch_size=32, hidden=(8,),
                                        embedding_dim=8, max_length=MAX_LENGTH, seed=3))
    jid, _ = jobs.create_request(dfs, req)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.version is not None
    return versions.load_version(dfs, req.model_name, st.version)


def test_tensorflow_and_mxnet_text_models_give_the_same_token_ids(dfs: Path,
                                                                  tmp_path: Path) -> None:
    import keras

    rows = [{"text": t, "label": "a" if i % 2 else "b"} for i, t in enumerate(UNICODE * 4)]
    path = tmp_path / "texts.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    uri = put_dataset(root=dfs, path=path, text_columns=("text",)).uri

    tf_version = _train(dfs, uri, "tensorflow")
    model = keras.models.load_model(tf_version.path / "model.keras", compile=False)
    assert model.inputs[0].dtype == "int32"
    assert not any(isinstance(layer, keras.layers.TextVectorization) for layer in model.layers)
    (tf_inp,) = tf_version.manifest.inputs
    assert tf_inp.vocabulary is not None
    tf_vocab = tokens.read_vocabulary(tf_version.path / tf_inp.vocabulary)
    texts = np.array(UNICODE, dtype=object)
    tf_ids = text_codec.token_ids(tf_inp, texts, tf_vocab)

    mx_version = _train(dfs, uri, "mxnet")
    (inp,) = mx_version.manifest.inputs
    assert inp.vocabulary is not None
    vocab = tokens.read_vocabulary(mx_version.path / inp.vocabulary)
    mx_ids = codec("text").mxnet_feed(inp, texts, vocab)

    assert tf_vocab == vocab  # both learned the one vocabulary
    np.testing.assert_array_equal(tf_ids, mx_ids)
    words = tokens.encode_text(pa.array(UNICODE, pa.string()), vocab, max_length=MAX_LENGTH)
    empty = words[:, 0] == tokens.PAD  # a text of no token reads as one unknown token
    np.testing.assert_array_equal(tf_ids[:, :MAX_LENGTH][~empty], words[~empty])
    assert (tf_ids[empty, 0] == tokens.OOV).all()
    nbsp = UNICODE.index("check\u00a0my\u00a0balance")
    assert "check\u00a0my\u00a0balance" in vocab  # one token, in both frameworks
    assert (words > tokens.OOV).sum() > len(UNICODE)  # real tokens, not all unknown
    assert words[nbsp, 1] == tokens.PAD
