"""The chart's environment and the settings classes are one list: every ``HEADRACE_*`` variable
the chart sets is a setting some role reads, and every control-plane setting is set by the
chart (or listed below with the reason it is left at its default)."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest
from pydantic_settings import BaseSettings

from headrace.core.settings import Settings
from headrace.scorers.engine.settings import DriftSettings, ScorerSettings
from headrace.topology.pod_security import pod_spec_of
from headrace.trainers.control.settings import ControlSettings
from tests.chart.test_chart import CHART, VALUE_SETS, render_docs

# Operator caps (Settings.max_*): the chart sets them on the control plane and, through
# HEADRACE_K8S_TRAINER_ENV, on trainer pods; they must stay settings.
CAPS = {"HEADRACE_MAX_LAYERS", "HEADRACE_MAX_PARAMETERS", "HEADRACE_MAX_EPOCHS",
        "HEADRACE_MAX_GPUS", "HEADRACE_MAX_WORKERS", "HEADRACE_MAX_DATASET_BYTES"}
# Control-plane settings the chart leaves at their defaults, and why.
NOT_IN_CHART = {
    "HEADRACE_CONTROL_HTTP_HOST": "0.0.0.0, what a pod needs for its probes",
    "HEADRACE_CONTROL_REBUILD_TABLE": "a one-off operator action after a lost broker "
                                      "(`headrace control --rebuild-table`), not a standing value",
    "HEADRACE_CONTROL_RECOVERY_DEADLINE_S": "120 s: a stuck recovery is said long before a pod "
                                            "is given up on",
}
EVERYTHING: dict[str, Any] = {
    **VALUE_SETS["schedules"],
    "kafka": {"sasl": {"enabled": True, "username": "u", "password": "p"},
              "tls": {"enabled": True, "caSecret": "ca"}},
    "scorerGroups": VALUE_SETS["gpu-scorers"]["scorerGroups"],
}


def env_names(cls: type[BaseSettings]) -> set[str]:
    prefix = str(cls.model_config.get("env_prefix", ""))
    return {f"{prefix}{name}".upper() for name in cls.model_fields}


def chart_env(values: dict[str, Any]) -> dict[str, set[str]]:
    """component -> the HEADRACE_* variables its containers get."""
    with helm.Chart.load(CHART) as chart:
        docs = render_docs(chart, values)
    out: dict[str, set[str]] = {}
    for d in docs:
        pod = pod_spec_of(d)
        if pod is None:
            continue
        component = d["metadata"]["labels"]["app.kubernetes.io/component"]
        names = {e["name"] for c in pod["containers"] for e in c.get("env", [])}
        out.setdefault(component, set()).update(n for n in names if n.startswith("HEADRACE_"))
    return out


KNOWN = (env_names(Settings) | env_names(ControlSettings) | env_names(ScorerSettings)
         | env_names(DriftSettings))


def test_the_operator_caps_are_settings() -> None:
    assert env_names(Settings) >= CAPS


@pytest.mark.parametrize("name", ["default", "everything"])
def test_every_variable_the_chart_sets_is_a_known_setting(name: str) -> None:
    env = chart_env(EVERYTHING if name == "everything" else VALUE_SETS[name])
    for component, names in env.items():
        assert names - KNOWN == set(), component


def test_every_control_plane_setting_is_set_by_the_chart() -> None:
    env = chart_env(EVERYTHING)
    assert set(env) == {"control-plane", "scorer", "schedule"}
    missing = env_names(ControlSettings) - env["control-plane"] - set(NOT_IN_CHART)
    assert missing == set()
    # Kafka, durability and the DFS come from the shared settings on every pod.
    shared = {"HEADRACE_BOOTSTRAP", "HEADRACE_KAFKA_CONFIG", "HEADRACE_KAFKA_PASSWORD_FILE",
              "HEADRACE_DFS_ROOT", "HEADRACE_REPLICATION_FACTOR", "HEADRACE_MIN_INSYNC_REPLICAS"}
    for component, names in env.items():
        assert shared <= names, component
    assert env["control-plane"] >= CAPS


def test_the_chart_control_plane_env_loads_as_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The values the chart renders validate as ControlSettings (``""`` reads as unset)."""
    with helm.Chart.load(CHART) as chart:
        docs = render_docs(chart, EVERYTHING)
    ctl = next(d for d in docs if d["kind"] == "Deployment"
               and d["metadata"]["labels"]["app.kubernetes.io/component"] == "control-plane")
    for e in ctl["spec"]["template"]["spec"]["containers"][0]["env"]:
        if e["name"].startswith("HEADRACE_") and "value" in e:
            monkeypatch.setenv(e["name"], e["value"])
    monkeypatch.setenv("HEADRACE_K8S_NAMESPACE", "ml")  # from the downward API in a pod
    s = ControlSettings()
    assert s.executor == "kubernetes" and s.k8s_image == "ghcr.io/headrace/headrace:0.1.0"
    assert s.k8s_queue is None and s.k8s_kafka_ca_secret == "ca"
    assert s.k8s_trainer_env["HEADRACE_MAX_GPUS"] == "8"
    assert s.triggers is not None and s.triggers.name == "triggers.yaml"


def _control_env(values: dict[str, Any]) -> dict[str, str]:
    with helm.Chart.load(CHART) as chart:
        docs = render_docs(chart, values)
    ctl = next(d for d in docs if d["kind"] == "Deployment"
               and d["metadata"]["labels"]["app.kubernetes.io/component"] == "control-plane")
    return {e["name"]: e.get("value", "")
            for e in ctl["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_training_pods_get_the_gpu_image_and_the_client_certificate_from_the_chart() -> None:
    env = _control_env({**EVERYTHING, "gpuImage": {"repository": "reg/hr", "tag": "9-gpu"},
                        "kafka": {"tls": {"enabled": True, "clientCertSecret": "kafka-user"}}})
    assert env["HEADRACE_K8S_GPU_IMAGE"] == "reg/hr:9-gpu"
    assert env["HEADRACE_K8S_KAFKA_CLIENT_CERT_SECRET"] == "kafka-user"
    s = ControlSettings(k8s_gpu_image=env["HEADRACE_K8S_GPU_IMAGE"],
                        k8s_kafka_client_cert_secret=env["HEADRACE_K8S_KAFKA_CLIENT_CERT_SECRET"])
    assert (s.k8s_gpu_image, s.k8s_kafka_client_cert_secret) == ("reg/hr:9-gpu", "kafka-user")
    # No client certificate: "" reads as unset.
    env = _control_env(EVERYTHING)
    assert ControlSettings(k8s_kafka_client_cert_secret=env[
        "HEADRACE_K8S_KAFKA_CLIENT_CERT_SECRET"]).k8s_kafka_client_cert_secret is None


def test_other_client_certificate_key_names_are_refused_for_training_pods() -> None:
    with pytest.raises(helm.HelmError, match=r"mount the client Secret's user\.crt"):
        _control_env({**EVERYTHING, "kafka": {"tls": {
            "enabled": True, "clientCertSecret": "c", "certKey": "tls.crt"}}})
    # The local executor starts no training pods: any key names do.
    env = _control_env({**EVERYTHING, "trainer": {"executor": "local"}, "kafka": {"tls": {
        "enabled": True, "clientCertSecret": "c", "certKey": "tls.crt"}}})
    assert env["HEADRACE_K8S_KAFKA_CLIENT_CERT_SECRET"] == "c"
