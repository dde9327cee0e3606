"""The canary's decisions from its counts: roll back only when the candidate is clearly worse,
advance by records (not minutes) when it is not, promote at the step of 100."""

from __future__ import annotations

from headrace.contracts import Canary
from headrace.rollout.canary_steps import (
    ACCURACY_MIN_LABELLED,
    Labelled,
    Ledger,
    Verdict,
    advanced,
    judge,
)


def _canary(**kw: object) -> Canary:
    return Canary(**{"percent": 5.0, "steps": [25.0, 50.0, 100.0], "min_records": 100,
                     "salt": "s", **kw})  # type: ignore[arg-type]


def _ledger(cand: tuple[int, int], prod: tuple[int, int], percent: float = 5.0) -> Ledger:
    led = Ledger("s", percent)
    led.add(candidate=cand, production=prod)
    return led


def test_a_candidate_failing_every_record_of_one_batch_rolls_back() -> None:
    # One batch of 512 at 5%: ~25 records to the candidate, all failed.
    d = judge(_canary(), _ledger((25, 25), (487, 0)))
    assert d.verdict == Verdict.ROLLBACK
    assert "25/25" in d.reason and "0/487" in d.reason


def test_one_failure_among_a_few_records_is_noise_not_a_rollback() -> None:
    assert judge(_canary(), _ledger((30, 1), (500, 0))).verdict == Verdict.HOLD


def test_equal_error_rates_never_roll_back_even_when_high() -> None:
    d = judge(_canary(), _ledger((1000, 100), (19000, 1900)))
    assert d.verdict == Verdict.ADVANCE and d.next_percent == 25.0


def test_steps_wait_for_min_records_counted_in_the_current_step() -> None:
    led = _ledger((99, 0), (2000, 0))
    assert judge(_canary(), led).verdict == Verdict.HOLD
    led.add(candidate=(1, 0), production=(20, 0))
    assert judge(_canary(), led).verdict == Verdict.ADVANCE
    # Another replica advanced to 25%: this one counts the new step from zero.
    nxt = advanced(_canary(), 25.0)
    assert nxt.percent == 25.0 and nxt.steps == [50.0, 100.0]
    led.follow(nxt)
    assert led.step_records == 0 and judge(nxt, led).verdict == Verdict.HOLD
    assert led.candidate.records == 100  # the error counts span the whole canary


def test_the_step_before_100_promotes_and_no_steps_holds() -> None:
    c = _canary(percent=50.0, steps=[100.0])
    assert judge(c, _ledger((100, 0), (100, 0), 50.0)).verdict == Verdict.PROMOTE
    assert judge(_canary(steps=[]), _ledger((500, 0), (500, 0))).verdict == Verdict.HOLD


def test_a_doubtful_candidate_holds_instead_of_advancing() -> None:
    # 3% vs 0%: worse by more than the 1% margin, but not with 95% confidence on 100 records.
    d = judge(_canary(), _ledger((100, 3), (2000, 0)))
    assert d.verdict == Verdict.HOLD and "not yet clearly worse" in d.reason


def test_labelled_records_required_hold_the_step() -> None:
    d = judge(_canary(min_labelled=10), _ledger((500, 0), (500, 0)))
    assert d.verdict == Verdict.HOLD and "0/10 labelled candidate records" in d.reason


def test_a_step_advances_once_the_candidate_has_min_labelled_labelled_records_in_it() -> None:
    c = _canary(min_labelled=40)
    led = _ledger((500, 0), (500, 0))
    led.labels(Labelled(300, 290), Labelled(39, 38))
    assert judge(c, led).verdict == Verdict.HOLD  # production's labels do not count
    led.labels(Labelled(300, 290), Labelled(40, 38))
    assert judge(c, led).verdict == Verdict.ADVANCE
    # The next step counts its own labelled records, from the total when it began.
    nxt = advanced(c, 25.0)
    led.follow(nxt)
    assert led.step_labelled == 0 and judge(nxt, led).verdict == Verdict.HOLD
    led.add(candidate=(100, 0), production=(100, 0))
    led.labels(Labelled(400, 390), Labelled(79, 77))
    assert judge(nxt, led).verdict == Verdict.HOLD
    led.labels(Labelled(400, 390), Labelled(80, 78))
    assert judge(nxt, led).verdict == Verdict.ADVANCE
    # A scorer (re)starting mid-step counts the step's labelled records from what it read back.
    fresh = Ledger("s", 5.0, step_records=500)
    fresh.labels(Labelled(400, 390), Labelled(80, 78), new_step=True)
    assert fresh.step_labelled == 0 and judge(c, fresh).verdict == Verdict.HOLD


def test_a_clearly_less_accurate_candidate_rolls_back_naming_accuracy() -> None:
    c = _canary(max_accuracy_drop=0.05)
    led = _ledger((40, 0), (400, 0))  # too few records for a step: the rollback comes first
    led.labels(Labelled(200, 196), Labelled(40, 20))
    d = judge(c, led)
    assert d.verdict == Verdict.ROLLBACK
    assert "live accuracy 0.5000 (20/40)" in d.reason and "0.9800 (196/200)" in d.reason
    assert "margin 0.05" in d.reason
    assert judge(_canary(), led).verdict == Verdict.HOLD  # no max_accuracy_drop: not judged


def test_accuracy_never_rolls_back_on_few_labels_and_doubt_holds() -> None:
    c = _canary(max_accuracy_drop=0.05)
    led = _ledger((500, 0), (500, 0))
    few = ACCURACY_MIN_LABELLED - 1
    led.labels(Labelled(1000, 1000), Labelled(few, 0))  # 0% right, but too few labelled
    assert judge(c, led).verdict == Verdict.ADVANCE
    # 88% vs 97%: worse by more than the margin, but not with 95% confidence on 50 labels.
    led.labels(Labelled(1000, 970), Labelled(50, 44))
    d = judge(c, led)
    assert d.verdict == Verdict.HOLD and "not yet clearly worse" in d.reason
    # Within the margin: advances.
    led.labels(Labelled(1000, 970), Labelled(50, 47))
    assert judge(c, led).verdict == Verdict.ADVANCE
