"""Reading Kueue's reason from a Workload's conditions (the real Kueue's Workloads are read in
tests/kube/test_kueue_real.py)."""

from __future__ import annotations

from typing import Any

import pytest

from headrace.trainers.executors.kubernetes_kueue import admission_wait, workloads_of

QUOTA = ("couldn't assign flavors to pod set main: insufficient quota for cpu in flavor f, "
         "previously considered podsets requests (0) + current podset request (40) > maximum "
         "capacity (30)")


def workload(owner: str, *conds: tuple[str, str, str]) -> dict[str, Any]:
    return {"metadata": {"ownerReferences": [{"kind": "Job", "name": owner}]},
            "status": {"conditions": [{"type": t, "status": s, "reason": "R", "message": m}
                                      for t, s, m in conds]}}


@pytest.mark.parametrize(("conds", "want"), [
    ((), None),
    ((("QuotaReserved", "False", QUOTA),), f"Kueue: {QUOTA}"),
    ((("QuotaReserved", "True", "Quota reserved in ClusterQueue cq"),
      ("Admitted", "False", "The workload has not all checks ready")),
     "Kueue: The workload has not all checks ready"),
    ((("QuotaReserved", "True", "q"), ("Admitted", "True", "The workload is admitted")), None),
    ((("Evicted", "True", "Exceeded the PodsReady timeout"),
      ("QuotaReserved", "False", "Pending")), "Kueue: Exceeded the PodsReady timeout"),
    ((("Evicted", "False", "old"), ("QuotaReserved", "False", QUOTA)), f"Kueue: {QUOTA}"),
])
def test_the_reason_is_the_condition_holding_the_workload_back(
        conds: tuple[tuple[str, str, str], ...], want: str | None) -> None:
    assert admission_wait(workload("j", *conds)) == want


def test_workloads_are_matched_by_owner_in_the_first_served_version() -> None:
    asked: list[str] = []
    mine, other = workload("train-a-worker-0"), workload("train-b-worker-0")

    def list_call(version: str) -> Any:
        asked.append(version)
        return None if version == "v1beta2" else {"items": [other, mine]}

    assert workloads_of(list_call, "train-a-worker-0") == [mine]
    assert asked == ["v1beta2", "v1beta1"]
    assert workloads_of(lambda v: None, "x") == []
