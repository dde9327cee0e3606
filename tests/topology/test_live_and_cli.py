from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k

from headrace.cli.topology_cmd import app
from headrace.core.errors import ConfigError
from headrace.topology.applyset import ApplySet
from headrace.topology.cluster import load_cluster
from headrace.topology.live import cluster_from_live
from tests.topology.fake_api import FakeApiServer, fake_client


def node(name: str, rack: str, gpus: int = 0, unschedulable: bool = False) -> k.V1Node:
    alloc = {"cpu": "31500m", "memory": "128Gi"}
    labels = {"topology.headrace.io/rack": rack, "topology.kubernetes.io/zone": "z1"}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
        labels["nvidia.com/gpu.product"] = "NVIDIA-A100"
    return k.V1Node(metadata=k.V1ObjectMeta(name=name, labels=labels),
                    spec=k.V1NodeSpec(unschedulable=unschedulable),
                    status=k.V1NodeStatus(allocatable=alloc))


def local_pv(name: str, host: str) -> k.V1PersistentVolume:
    req = k.V1NodeSelectorRequirement(key="kubernetes.io/hostname", operator="In", values=[host])
    return k.V1PersistentVolume(
        metadata=k.V1ObjectMeta(name=name),
        spec=k.V1PersistentVolumeSpec(
            claim_ref=k.V1ObjectReference(name=f"{name}-claim"),
            node_affinity=k.V1VolumeNodeAffinity(required=k.V1NodeSelector(
                node_selector_terms=[k.V1NodeSelectorTerm(match_expressions=[req])]))))


def test_a_live_cluster_becomes_a_cluster_spec() -> None:
    spec = cluster_from_live(
        nodes=[node("n1", "r1", gpus=4), node("n2", "r2", unschedulable=True),
               k.V1Node(metadata=k.V1ObjectMeta(name="norack", labels={}))],
        volumes=[local_pv("pv1", "n1")],
        topics={"data.clicks": [[1, 2], [2, 3]], "predictions.clicks": [[1]],
                "data.clicks.dlq": [[1]]},
        broker_racks={1: "r1", 2: "r2", 3: "r3"},
        stream_volumes={"clicks": "pv1"},
    )
    n1 = spec.nodes[0]
    assert (n1.cpu_m, n1.memory_mib, n1.gpus, n1.gpu_type) == (31500, 131072, 4, "NVIDIA-A100")
    assert [n.name for n in spec.nodes] == ["n1", "n2"] and not spec.nodes[1].schedulable
    assert spec.volumes[0].nodes == ("n1",) and spec.volumes[0].claim_name == "pv1-claim"
    [s] = spec.streams
    assert (s.name, s.volume, s.replica_racks()) == ("clicks", "pv1", [("r1", "r2"), ("r2", "r3")])


@pytest.mark.parametrize(("text", "message"), [
    (None, "cluster file not found"),
    ("nodes: [", "invalid YAML at line"),
    ("- a\n- b\n", "expected a mapping"),
    ("nodes:\n  - {name: n1, rack: r1, cpuMillis: -1, memoryMiB: 1}\n", "nodes.0.cpuMillis"),
    ("nodes: []\nstreams:\n  - {name: s, partitions: 2, volume: nope}\n", "unknown volume"),
    ("nodes: []\nstreams:\n  - {name: 'Bad Name', partitions: 2}\n", "invalid stream name"),
])
def test_bad_cluster_files_are_one_line_config_errors(tmp_path: Path, text: str | None,
                                                      message: str) -> None:
    path = tmp_path / "cluster.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        load_cluster(path)
    assert "\n" not in str(info.value)


@pytest.fixture
def cluster_file(tmp_path: Path, three_racks: Any) -> Path:
    path = tmp_path / "cluster.yaml"
    three_racks["scorer"] = {"gpus": 1, "maxPartitionsPerPod": 4}
    path.write_text(yaml.safe_dump(three_racks))
    return path


def test_plan_command_prints_a_table_and_writes_values_manifests_and_plan(
    cluster_file: Path, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    out = tmp_path / "out"
    res = CliRunner().invoke(app, [
        "plan", "--cluster", str(cluster_file), "--values-out", str(tmp_path / "v.yaml"),
        "--manifests", str(out), "--plan-out", str(tmp_path / "plan.json")])
    assert res.exit_code == 0, res.output
    assert "clicks-r1" in res.output and "100.0% in-rack" in res.output
    values = yaml.safe_load((tmp_path / "v.yaml").read_text())
    assert [g["name"] for g in values["scorerGroups"]] == ["clicks-r1", "clicks-r2", "clicks-r3"]
    kinds = sorted({yaml.safe_load(p.read_text())["kind"] for p in out.iterdir()})
    assert kinds == ["PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount",
                     "StatefulSet"]
    again = CliRunner().invoke(app, ["plan", "--cluster", str(cluster_file), "--json",
                                     "--previous", str(tmp_path / "plan.json")])
    assert json.loads(again.output)["moved_partitions"] == 0


def test_explain_and_rendered_apply(cluster_file: Path) -> None:
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["explain", "--cluster", str(cluster_file)])
    assert res.output.strip() == "every decision is local: 12 partitions read in-rack"
    res = CliRunner().invoke(app, ["apply", "--cluster", str(cluster_file), "--render",
                                   "-n", "ml"])
    docs = list(yaml.safe_load_all(res.output))
    assert res.exit_code == 0 and {d["metadata"]["namespace"] for d in docs} == {"ml"}


def test_cli_errors_are_one_line_with_a_non_zero_exit(
    cluster_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from headrace.cli import main

    assert main(["topology", "plan", "--cluster", str(tmp_path / "missing.yaml")]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cluster file not found" in err
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["topology", "apply", "--cluster", str(cluster_file)]) == 2  # configuration
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no Kubernetes configuration" in err


APPLIED = ("rbac.yaml", "scorers.yaml", "keda.yaml", "servicemonitor.yaml")


def _kind_name(d: dict[str, Any]) -> tuple[str, str]:
    return d["kind"], d["metadata"]["name"]


def test_dry_run_apply_is_the_chart_rendered_with_the_plan_values(
    cluster_file: Path, tmp_path: Path
) -> None:
    """One source: what apply creates is what `helm template` makes of `plan --values-out`."""
    import helm_python as helm
    from typer.testing import CliRunner

    from tests.chart.test_chart import CHART

    data = yaml.safe_load(cluster_file.read_text())
    data["trainer"] = {"workers": 2}
    data["deploy"] = {"image": "reg.example:5000/ml/headrace:1.2",
                      "gpuImage": "reg.example:5000/ml/headrace:1.2-gpu",
                      "kafkaSecret": "corp-kafka", "dfsClaim": "shared-cephfs"}
    cluster_file.write_text(yaml.safe_dump(data))
    values_file = tmp_path / "v.yaml"
    plan = CliRunner().invoke(app, ["plan", "--cluster", str(cluster_file),
                                    "--values-out", str(values_file)])
    assert plan.exit_code == 0, plan.output
    applied = CliRunner().invoke(app, ["apply", "--cluster", str(cluster_file), "--render",
                                       "-n", "ml"])
    assert applied.exit_code == 0, applied.output
    docs = [d for d in yaml.safe_load_all(applied.output) if d]

    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(yaml.safe_load(values_file.read_text()), name="headrace",
                                namespace="ml")
    expected = []
    for path, text in rendered.items():
        if path.rsplit("/", 1)[-1] in APPLIED:
            for d in yaml.safe_load_all(text):
                if d:
                    d["metadata"]["namespace"] = "ml"
                    # apply labels its objects as members of its ApplySet, not Helm's
                    expected.append(ApplySet(namespace="ml").member(d))

    assert sorted(docs, key=_kind_name) == sorted(expected, key=_kind_name)
    assert sorted({d["kind"] for d in docs}) == [
        "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount", "StatefulSet"]
    role = next(d for d in docs if d["kind"] == "Role")
    # 2 workers but no gang scheduler named: no Volcano rules (a missing scheduler would
    # leave the training pods Pending)
    assert "scheduling.volcano.sh" not in str(role["rules"])
    pod = next(d for d in docs if d["kind"] == "StatefulSet")["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "reg.example:5000/ml/headrace:1.2-gpu"


def test_apply_creates_then_patches_every_object_through_the_kubernetes_client(
    cluster_file: Path,
) -> None:
    """The client-side path (``--client-side``): POST, then strategic merge patches."""
    from headrace.topology import commands

    server = FakeApiServer()
    api = fake_client(server)
    _, dry = commands.run_apply(cluster_path=cluster_file, namespace="ml", render=True)
    manifests = [d for d in yaml.safe_load_all(dry[0]) if d]
    _, first = commands.run_apply(cluster_path=cluster_file, namespace="ml", api_client=api,
                                  server_side=False)
    assert first == [f"created {m['kind']}/{m['metadata']['name']}" for m in manifests]
    parent = server.objects.pop("/api/v1/namespaces/ml/configmaps/headrace-topology")
    assert sorted(server.objects.values(), key=_kind_name) == sorted(manifests, key=_kind_name)
    server.objects["/api/v1/namespaces/ml/configmaps/headrace-topology"] = parent
    assert "/apis/apps/v1/namespaces/ml/statefulsets/headrace-clicks-r1" in server.objects
    assert "/apis/rbac.authorization.k8s.io/v1/namespaces/ml/roles/headrace-control" in (
        server.objects)
    _, again = commands.run_apply(cluster_path=cluster_file, namespace="ml", api_client=api,
                                  server_side=False)
    assert again == [f"patched {m['kind']}/{m['metadata']['name']}" for m in manifests]
    patches = {ctype for method, _, ctype in server.requests if method == "PATCH"}
    assert patches == {"application/strategic-merge-patch+json"}
    assert not any(method == "DELETE" for method, _, _ in server.requests)


def test_keda_objects_are_applied_through_the_custom_objects_api(cluster_file: Path) -> None:
    from headrace.topology import commands
    from headrace.topology.values import ScorerOptions

    server = FakeApiServer()
    api = fake_client(server)
    opts = ScorerOptions(mode="consumer-group", keda=True, service_monitor=True)
    for _ in range(2):
        commands.run_apply(cluster_path=cluster_file, namespace="ml", api_client=api,
                           options=opts, server_side=False)
    scaled = {p for p in server.objects if "/apis/keda.sh/v1alpha1/namespaces/ml/" in p}
    assert scaled == {f"/apis/keda.sh/v1alpha1/namespaces/ml/scaledobjects/headrace-clicks-r{i}"
                      for i in (1, 2, 3)}
    assert "/apis/monitoring.coreos.com/v1/namespaces/ml/servicemonitors/headrace-scorers" in (
        server.objects)
    custom_patches = {c for m, p, c in server.requests if m == "PATCH" and "keda.sh" in p}
    assert custom_patches == {"application/merge-patch+json"}


def test_apply_without_the_chart_is_a_one_line_error(
    cluster_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from headrace.cli import main

    code = main(["topology", "apply", "--cluster", str(cluster_file), "--render",
                 "--chart", str(tmp_path / "nowhere")])
    err = capsys.readouterr().err
    assert code != 0 and err.count("\n") == 1 and "Helm chart not found" in err
