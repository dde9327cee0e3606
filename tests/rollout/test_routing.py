"""Canary routing: the share per partition is within one point of the target over 100,000 keys
(partitioned as librdkafka does, CRC32), a key stays on the candidate as the percentage rises,
and the decision depends on the salt and the key alone."""

from __future__ import annotations

import itertools
import zlib

import pytest

from headrace.rollout import routing

KEYS = [f"customer-{i}".encode() for i in range(100_000)]


# At HEADRACE_PARTITIONS' default of 3, a partition holds ~33,000 of the keys, so one point is
# 3.6 standard deviations of the share even at 50%; at 12 partitions and 10%, 3 of them.
@pytest.mark.parametrize(("partitions", "percent"), [(3, 1), (3, 10), (3, 50), (12, 10)])
def test_the_canary_share_of_every_partition_is_within_one_point(partitions: int,
                                                                 percent: float) -> None:
    mask = routing.candidate_mask(KEYS, b"canary-7", percent)
    per: dict[int, list[int]] = {p: [0, 0] for p in range(partitions)}
    for key, chosen in zip(KEYS, mask, strict=True):
        part = zlib.crc32(key) % partitions  # librdkafka's consistent partitioner
        per[part][0] += int(chosen)
        per[part][1] += 1
    shares = {p: 100 * c / n for p, (c, n) in per.items()}
    assert all(abs(s - percent) <= 1.0 for s in shares.values()), shares


def test_keys_stay_on_the_candidate_as_the_percentage_rises() -> None:
    salt = b"canary-8"
    steps = [routing.candidate_mask(KEYS[:20_000], salt, p) for p in (5, 25, 50, 100)]
    for lower, higher in itertools.pairwise(steps):
        assert all(h for lo, h in zip(lower, higher, strict=True) if lo)
    assert all(steps[-1])


def test_the_decision_is_stable_and_depends_on_the_salt() -> None:
    a = routing.candidate_mask(KEYS[:5000], b"one", 30)
    assert a == [routing.to_candidate(k, b"one", 30) for k in KEYS[:5000]]
    b = routing.candidate_mask(KEYS[:5000], b"two", 30)
    overlap = sum(x and y for x, y in zip(a, b, strict=True)) / 5000
    assert overlap == pytest.approx(0.09, abs=0.02)  # independent draws: 0.3 * 0.3


def test_a_percentage_outside_0_to_100_is_refused() -> None:
    with pytest.raises(ValueError, match="between 0 and 100"):
        routing.threshold(101)
