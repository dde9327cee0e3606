"""What ``models compare`` prints for a canary-only pair: its arms score different keys, so
there are no paired rows, no agreement and no paired test; accuracy per arm still shows."""

from __future__ import annotations

from headrace.contracts import LiveCounts, RolloutRole
from headrace.ops.rollout.compare_png import summary_lines
from headrace.rollout.evidence import LiveEvidence


def _canary(partition: int, labelled: bool) -> LiveCounts:
    truth = {"production_truth": [[40, 2], [3, 55]], "candidate_truth": [[9, 1], [0, 10]],
             "labelled": 120} if labelled else {}
    return LiveCounts(stream="s", model_name="m", production_version=1, candidate_version=2,
                      role=RolloutRole.CANARY, partition=partition, next_offset=10,
                      classes=["no", "yes"], matrix=[], **truth)  # type: ignore[arg-type]


def test_a_canary_only_pair_shows_accuracy_per_arm_and_no_paired_figures() -> None:
    text = "\n".join(summary_lines(LiveEvidence.of([_canary(0, True), _canary(1, True)])))
    assert "0 paired rows over 2 partition(s) (canary)" in text
    assert "no paired rows" in text and "agreement n" not in text and "McNemar" not in text
    assert "live accuracy v1 95.0%" in text and "(95% Wilson" in text
    assert "live accuracy v2 95.0%" in text and "40 labelled" in text


def test_a_canary_only_pair_without_labels_says_so_and_estimates_nothing() -> None:
    text = "\n".join(summary_lines(LiveEvidence.of([_canary(0, False)])))
    assert "no labels yet" in text and "estimate" not in text and "nan" not in text
