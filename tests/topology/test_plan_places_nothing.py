"""A plan that places no partition says why and exits non-zero (the cluster file the docs
used to show: one GPU node, reserved whole for a training gang, and two racks without nodes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.cli import main

PLACES_NOTHING = """\
nodes:
  - {name: gpu-a1, rack: r1, zone: z1, cpuMillis: 64000, memoryMiB: 262144,
     gpus: 8, gpuType: a100, taints: [{key: nvidia.com/gpu, value: present}]}
  - {name: cpu-c1, rack: r1, zone: z1, cpuMillis: 32000, memoryMiB: 131072}
streams:
  - {name: clicks, partitions: 12, rackCycle: [r1, r2, r3], replicationFactor: 2}
  - {name: views, partitions: 3, partitionRacks: [[r1, r2], [r2, r3], [r3, r1]]}
scorer:  {gpus: 1, cpuMillis: 2000, memoryMiB: 4096, maxPartitionsPerPod: 8}
trainer: {workers: 2, gpusPerWorker: 8, gpuType: a100}
"""


@pytest.mark.parametrize("json_out", [False, True])
def test_a_plan_that_places_nothing_says_why_and_exits_non_zero(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], json_out: bool) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(PLACES_NOTHING)
    code = main(["topology", "plan", "--cluster", str(cluster), *(["--json"] if json_out else [])])
    err = capsys.readouterr().err.splitlines()
    assert code == 1
    assert err[0] == "headrace: error: the plan places 0 of 15 partitions:"
    assert any(line.startswith("  [no-capacity] clicks partitions 0-11") for line in err), err


def test_the_example_cluster_plan_places_every_partition_and_exits_zero(
        capsys: pytest.CaptureFixture[str]) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"
    assert main(["topology", "plan", "--cluster", str(example)]) == 0
    assert "15/15 partitions placed" in capsys.readouterr().out.replace("\n", " ")
