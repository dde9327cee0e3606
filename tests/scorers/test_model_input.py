"""The feature matrix on its way into the model: aligned, reused, read in place; and the cycle
collector settings the scorer runs with. Real TensorFlow, a real published model."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from headrace.core import heap
from headrace.scorers.engine.core import score_rows
from headrace.scorers.engine.models import load_model
from headrace.scorers.wire.buffers import ALIGN, Scratch, is_aligned
from headrace.scorers.wire.decoding import decode
from headrace.streams.codecs import encode_json
from headrace.streams.consuming import RawBatch
from tests.scorers.conftest import publish_tf, rows


def _json_batch(n: int, seed: int = 0) -> RawBatch:
    values = [encode_json(r) for r in rows(n, seed=seed)]
    return RawBatch(values, [b"k"] * n, ["data.t"] * n, np.zeros(n, np.int32),
                    np.arange(n, dtype=np.int64), np.zeros(n, np.int64), [None] * n)


@pytest.fixture
def collector_off() -> Iterator[None]:
    """Reference counting alone decides what is freed (the cycle collector would hide a cycle)."""
    was = gc.isenabled()
    gc.disable()
    yield
    if was:
        gc.enable()


def test_scratch_lends_aligned_memory_again_only_once_nothing_refers_to_it() -> None:
    # Addresses are read into plain variables: pytest's assert rewrite keeps its operands alive.
    s = Scratch()
    a = s.matrix(100, 3)
    shape, dtype, aligned, first = a.shape, a.dtype, is_aligned(a), a.ctypes.data
    assert shape == (100, 3) and dtype == np.float32 and aligned
    b = s.matrix(100, 3)
    second = b.ctypes.data
    assert second != first  # ``a`` is alive: never handed out twice
    del a, b
    c = s.matrix(50, 3)
    kept = c.ctypes.data
    assert kept % ALIGN == 0
    capsule = c.__dlpack__()  # a framework holding the matrix through DLPack
    del c
    d = s.matrix(50, 3)
    latest = d.ctypes.data
    assert latest != kept
    del capsule, d
    again = s.matrix(40, 3).ctypes.data
    assert again == latest  # free again: the same memory
    bigger = s.matrix(10_000, 3).nbytes
    assert bigger == 120_000  # more than the buffer holds: a new one


def test_decoding_into_scratch_reuses_it_once_the_previous_batch_is_scored(
        tmp_path: Path, collector_off: None) -> None:
    publish_tf(tmp_path, "m")
    model = load_model(root=tmp_path, name="m", alias="production", device="cpu", max_batch=256)
    s = Scratch()
    feats = decode(_json_batch(200, seed=1), model.features, scratch=s)
    first = feats.x.ctypes.data
    scores, errors = score_rows(model, feats.x)
    assert not errors and scores.shape == (200, 2)
    # Nothing but ``feats`` refers to the matrix after scoring (no cycle kept it alive) ...
    refs = sys.getrefcount(feats.x)  # outside ``assert``: pytest's rewrite keeps operands
    assert refs == 2
    del feats
    # ... so the next batch is decoded into the same memory, and scored right.
    batch = _json_batch(150, seed=2)
    again = decode(batch, model.features, scratch=s)
    assert again.x.ctypes.data == first
    fresh = decode(batch, model.features)
    assert fresh.x.ctypes.data != first
    np.testing.assert_array_equal(again.x, fresh.x)
    np.testing.assert_allclose(score_rows(model, again.x)[0], score_rows(model, fresh.x)[0],
                               rtol=1e-6)


def test_tensorflow_reads_an_aligned_matrix_in_place_and_copies_any_other(tmp_path: Path) -> None:
    tf_adapter = pytest.importorskip("headrace.scorers.adapters.tensorflow")
    x = Scratch().matrix(64, 4)
    x[:] = np.arange(256, dtype=np.float32).reshape(64, 4)
    shared = tf_adapter.as_tensor(x)
    x[0, 0] = 42.0
    assert float(shared[0, 0]) == 42.0  # no copy was made
    tail = x[1:]  # 16 bytes past the boundary: TensorFlow would abort on it if shared
    assert not is_aligned(tail)
    copied = tf_adapter.as_tensor(tail)
    x[1, 0] = -1.0
    assert float(copied[0, 0]) == 4.0
    as_f64 = tf_adapter.as_tensor(np.ones((3, 4)))  # other dtypes are converted
    assert as_f64.dtype.name == "float32"

    publish_tf(tmp_path, "m")
    model = load_model(root=tmp_path, name="m", alias="production", device="cpu", max_batch=64)
    np.testing.assert_allclose(model.fn(x[1:33]), model.fn(np.array(x[1:33])), rtol=1e-6)
    np.testing.assert_allclose(model.fn(x[:32]), model.fn(np.array(x[:32])), rtol=1e-6)


FREEZES = """
import gc
from headrace.scorers.adapters import adapter_for
adapter_for("tensorflow")
first = gc.get_freeze_count()
adapter_for("mxnet")  # as a swap to an MXNet version would, while a TF model serves
print(first, gc.get_freeze_count())
"""


def test_only_the_first_framework_import_is_frozen() -> None:
    out = subprocess.run([sys.executable, "-c", FREEZES], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    first, after_second = int(out[-2]), int(out[-1])
    assert first > 100_000  # TensorFlow's and Keras's import-time objects
    assert after_second <= first  # MXNet's import froze nothing (frozen objects may die)


def test_young_collections_are_rarer() -> None:
    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        assert heap.rarer_young_collections(8192) == 4 * 8192
        assert gc.get_threshold() == (4 * 8192, 10, 10)
        gc.set_threshold(100_000, 5, 5)
        assert heap.rarer_young_collections(64) == 100_000  # never more often than set
        gc.set_threshold(0)
        assert heap.rarer_young_collections(8192) == 0  # a collector turned off stays off
        assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*saved)
