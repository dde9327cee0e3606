"""The canary role's routing of a consumed batch: by key with the salt, and a record without a
key by its topic:partition:offset, as ``rollout.routing`` decides."""

from __future__ import annotations

import numpy as np

from headrace.rollout import routing
from headrace.scorers.rollout.canary import route
from headrace.streams.consuming import RawBatch


def _batch(keys: list[bytes | None]) -> RawBatch:
    n = len(keys)
    return RawBatch([b"{}"] * n, keys, ["data.s"] * n, np.arange(n, dtype=np.int32) % 3,
                    np.arange(n, dtype=np.int64) + 100, np.zeros(n, np.int64), [None] * n)


def test_keyed_and_unkeyed_records_are_routed_by_key_or_by_their_coordinates() -> None:
    keys: list[bytes | None] = [f"k{i}".encode() if i % 2 else None for i in range(4000)]
    batch = _batch(keys)
    got = route(batch, b"salt", 30)
    want = [routing.to_candidate(k if k is not None else routing.unkeyed("data.s", i % 3,
                                                                         i + 100), b"salt", 30)
            for i, k in enumerate(keys)]
    assert got.tolist() == want
    assert 0.27 < got.mean() < 0.33
    assert route(batch, b"salt", 30).tolist() == want  # the same batch routes the same way
    assert (route(batch, b"other", 30) != got).any()  # another salt, other keys
