"""The Gluon text family's convolution is a dense layer over windows of embeddings (MXNet 1.9's
oneDNN Conv1D output failed a later copy, "to.IsDefaultData()", in the final predict of the
held-out text jobs): the windows are exactly a same-padded convolution's input."""

from __future__ import annotations

import numpy as np
import pytest

gluon_families = pytest.importorskip("headrace.trainers.backends.gluon_families")  # numpy alias
mx = gluon_families.mx


def test_windows_are_each_token_with_its_neighbours_and_zeros_past_the_ends() -> None:
    from headrace.codecs import text as text_codec
    from headrace.contracts import ModelSpec
    _Text = gluon_families._Text

    body = _Text(ModelSpec(model="text", embedding_dim=4, hidden=(8,)), 50, 3, length=5)
    emb = np.arange(2 * 10 * 4, dtype=np.float32).reshape(2, 10, 4)  # 5 tokens + 5 bigrams
    got = body._windows(mx.nd, mx.nd.array(emb)).asnumpy()
    tokens = np.pad(emb[:, :5], ((0, 0), (1, 1), (0, 0)))
    want = np.concatenate([tokens[:, i:i + 5] for i in range(text_codec.CONV_WIDTH)], axis=2)
    np.testing.assert_array_equal(got, want)
