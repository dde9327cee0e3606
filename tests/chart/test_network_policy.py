"""The chart's NetworkPolicies, judged by what they allow (tests/chart/netpol.py evaluates them
as a CNI would): Kafka on the ports the bootstrap names, DNS per preset, trainers only to
their own job's trainers on the gang's ports (the executor's per-attempt policy)."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest
from kubernetes.client import ApiClient

from headrace.topology.validation import validate_object
from headrace.trainers.executors.kubernetes_objects import TrainingJobSpec, training_objects
from tests.chart.netpol import Address, Pod, allowed
from tests.chart.test_chart import CHART, MSK, render_docs, with_dfs

SCORER = Pod({"app.kubernetes.io/name": "headrace", "app.kubernetes.io/component": "scorer",
              "headrace.io/group": "clicks-r1"})
CONTROL = Pod({"app.kubernetes.io/name": "headrace",
               "app.kubernetes.io/component": "control-plane"})


def trainer(job: str) -> Pod:
    return Pod({"app.kubernetes.io/name": "headrace", "app.kubernetes.io/component": "trainer",
                "headrace.io/job": job})


KUBE_DNS = Pod({"k8s-app": "kube-dns"}, namespace="kube-system", ip="10.96.0.20")
NODELOCAL = Address("169.254.20.10")
OPENSHIFT_DNS = Pod({"dns.operator.openshift.io/daemonset-dns": "default"},
                    namespace="openshift-dns", ip="10.128.0.5")
BROKER = Address("10.0.5.17")
ELSEWHERE = Address("203.0.113.9")


@pytest.fixture(scope="module")
def chart() -> Any:
    with helm.Chart.load(CHART) as c:
        yield c


def policies(chart: Any, values: dict[str, Any]) -> list[dict[str, Any]]:
    docs = render_docs(chart, with_dfs(values))
    pols = [d for d in docs if d["kind"] == "NetworkPolicy"]
    for p in pols:
        validate_object(p)
    return pols


def test_msk_ports_from_the_bootstrap_are_open_and_the_defaults_closed(chart: Any) -> None:
    pols = policies(chart, {"kafka": {"bootstrap": MSK}})
    for pod in (SCORER, CONTROL, trainer("j1")):
        assert allowed(pols, pod, BROKER, 9096)
        assert not allowed(pols, pod, BROKER, 9092)
        assert not allowed(pols, pod, BROKER, 9098)  # IAM auth: not in this bootstrap
    # MSK with IAM (9098) named in the bootstrap, TLS brokers (9094) added explicitly.
    iam = policies(chart, {"kafka": {"bootstrap": "SASL_SSL://b-1.msk.example:9098"},
                           "networkPolicy": {"kafka": {"extraPorts": [9094]}}})
    assert allowed(iam, SCORER, BROKER, 9098) and allowed(iam, SCORER, BROKER, 9094)
    assert not allowed(iam, SCORER, BROKER, 9096)


def test_explicit_kafka_ports_and_peers_override_the_bootstrap(chart: Any) -> None:
    pols = policies(chart, {"kafka": {"bootstrap": MSK}, "networkPolicy": {"kafka": {
        "ports": [9093], "to": [{"ipBlock": {"cidr": "10.0.5.0/24"}}]}}})
    assert allowed(pols, SCORER, BROKER, 9093)
    assert not allowed(pols, SCORER, BROKER, 9096)
    assert not allowed(pols, SCORER, ELSEWHERE, 9093)  # only the brokers' CIDR


def test_a_bootstrap_without_ports_means_9092(chart: Any) -> None:
    pols = policies(chart, {"kafka": {"bootstrap": "kafka-a, kafka-b:9092"}})
    assert allowed(pols, SCORER, BROKER, 9092) and not allowed(pols, SCORER, BROKER, 9093)


def test_no_kafka_port_known_is_a_one_line_render_error(chart: Any) -> None:
    with pytest.raises(helm.HelmError, match=r"networkPolicy\.kafka\.ports") as info:
        chart.render(with_dfs({"kafka": {"existingSecret": "corp", "bootstrap": ""}}),
                     name="hr", namespace="ml")
    assert "no Kafka port can be read from kafka.bootstrap" in str(info.value)


@pytest.mark.parametrize(("preset", "dns", "port", "blocked"), [
    ("kube-dns", KUBE_DNS, 53, NODELOCAL),
    ("nodelocal", NODELOCAL, 53, ELSEWHERE),
    ("openshift", OPENSHIFT_DNS, 5353, KUBE_DNS),
])
def test_dns_presets_open_their_resolver_and_nothing_else(
        chart: Any, preset: str, dns: Any, port: int, blocked: Any) -> None:
    pols = policies(chart, {"networkPolicy": {"dns": {"preset": preset}}})
    for pod in (SCORER, CONTROL, trainer("j1")):
        for proto in ("UDP", "TCP"):
            assert allowed(pols, pod, dns, port, proto), (preset, pod)
            assert not allowed(pols, pod, blocked, port, proto), (preset, pod)
        assert not allowed(pols, pod, ELSEWHERE, 53, "UDP")


def test_nodelocal_keeps_kube_dns_for_pods_on_nodes_without_the_cache(chart: Any) -> None:
    pols = policies(chart, {"networkPolicy": {"dns": {"preset": "nodelocal"}}})
    assert allowed(pols, SCORER, KUBE_DNS, 53, "UDP") and allowed(pols, SCORER, NODELOCAL, 53,
                                                                  "UDP")


def test_dns_cidrs_and_peers_are_added_to_a_preset(chart: Any) -> None:
    pols = policies(chart, {"networkPolicy": {"dns": {
        "preset": "none", "cidrs": ["10.96.0.10/32"], "ports": [53, 1053],
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "dns"}}}]}}})
    assert allowed(pols, SCORER, Address("10.96.0.10"), 1053, "UDP")
    assert allowed(pols, SCORER, Pod({"app": "coredns"}, namespace="dns"), 53, "TCP")
    assert not allowed(pols, SCORER, KUBE_DNS, 53, "UDP")  # `none`: no kube-dns peer


def _gang(job_id: str, **kw: Any) -> tuple[list[dict[str, Any]], Pod]:
    """The executor's NetworkPolicy for one gang attempt and a pod with its Jobs' pod labels."""
    spec = TrainingJobSpec(job_id=job_id, model_name="m", image="i", namespace="ml",
                           workers=2, gang="none", **kw)
    objs = [ApiClient().sanitize_for_serialization(o)
            for o in training_objects(spec, owner_uid="u-1")]
    pols = [validate_object(o) for o in objs if o["kind"] == "NetworkPolicy"]
    [job] = [o for o in objs if o["kind"] == "Job"][:1]
    return pols, Pod(job["spec"]["template"]["metadata"]["labels"])


def test_trainers_reach_their_own_jobs_trainers_on_the_gang_ports_only(chart: Any) -> None:
    pols = policies(chart, {})
    a_pol, a = _gang("job-a", framework="tensorflow")  # allreduce: TF_CONFIG's port
    b_pol, b = _gang("job-b", framework="tensorflow")
    every = pols + a_pol + b_pol
    assert allowed(every, a, a, 2222)
    assert not allowed(every, a, b, 2222) and not allowed(every, b, a, 2222)
    for port in (22, 8080, 9092):
        assert not allowed(every, a, a, port)
    assert not allowed(every, a, SCORER, 2222)
    assert not allowed(every, SCORER, a, 2222)
    assert not allowed(every, a, ELSEWHERE, 2222)
    # Without the executor's policy (a single-pod job) no trainer accepts anything.
    assert not allowed(pols, trainer("j1"), trainer("j1"), 2222)


def test_parameter_server_gangs_open_the_scheduler_and_ephemeral_ports_to_their_job(
        chart: Any) -> None:
    pols = policies(chart, {})
    a_pol, a = _gang("ps-a", framework="mxnet", servers=1,
                        strategy="parameter_server")
    b_pol, b = _gang("ps-b", framework="mxnet", servers=1,
                        strategy="parameter_server")
    every = pols + a_pol + b_pol
    for port in (9091, 40000):  # ps-lite's scheduler, a port its nodes bind
        assert allowed(every, a, a, port)
        assert not allowed(every, b, a, port)
    assert not allowed(every, a, a, 2222)


def test_probes_reach_scorers_and_the_control_plane_reaches_the_api_server(chart: Any) -> None:
    pols = policies(chart, {})
    kubelet = Address("10.0.0.1")
    assert allowed(pols, Pod({"any": "x"}), SCORER, 8080)
    assert not allowed(pols, Pod({"any": "x"}), SCORER, 9999)
    assert allowed(pols, CONTROL, kubelet, 443) and allowed(pols, CONTROL, kubelet, 6443)
    assert not allowed(pols, SCORER, kubelet, 443)


def test_the_evaluator_treats_unselected_pods_as_open_and_honours_except() -> None:
    pol = {"kind": "NetworkPolicy", "metadata": {"name": "p"}, "spec": {
        "podSelector": {"matchLabels": {"app": "a"}}, "policyTypes": ["Egress"],
        "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}]}]}}
    a, other = Pod({"app": "a"}), Pod({"app": "b"})
    assert allowed([pol], a, Address("10.2.0.1"), 1)
    assert not allowed([pol], a, Address("10.1.0.1"), 1)
    assert allowed([pol], other, Address("10.1.0.1"), 1)
    assert not allowed([pol], a, Pod({"app": "b"}), 1)  # a pod with no IP: ipBlock is no match


def test_install_notes_say_which_kafka_ports_are_open(chart: Any) -> None:
    docs = chart.render(with_dfs({"kafka": {"bootstrap": MSK}, "networkPolicy": {
        "dns": {"preset": "nodelocal"}, "kafka": {"extraPorts": [9098]}}}),
        name="hr", namespace="ml")
    notes = next(text for path, text in docs.items() if path.endswith("NOTES.txt"))
    assert "egress to Kafka on TCP 9096, 9098, DNS preset nodelocal (169.254.20.10)" in notes
