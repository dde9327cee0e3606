"""The canary's decisions from its counts: roll back only when the candidate is clearly worse,
advance by records (not minutes) when it is not, promote at the step of 100."""

from __future__ import annotations

from headrace.contracts import Canary
from headrace.rollout.canary_steps import Ledger, Verdict, advanced, judge


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
    assert d.verdict == Verdict.HOLD and "labelled" in d.reason
