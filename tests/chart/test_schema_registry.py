"""The chart's Schema Registry settings: scorer.schemaRegistry and a group's own keys reach each
scorer group's pods as HEADRACE_SCHEMA_REGISTRY_*, the credentials only as mounted files, the
registry's egress only on the scorers' policy; what it renders validates and loads as settings."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest
import yaml

from headrace.core.settings import load_settings
from headrace.scorers.engine.settings import load_scorer_settings
from headrace.topology.validation import validate_object
from tests.chart.test_chart import CHART, GROUP, kinds, render_docs, with_dfs

REGISTRY = {"url": "https://registry.ml:8443/apis/ccompat/v7", "existingSecret": "registry-auth",
            "caSecret": "registry-ca"}
VALUES = with_dfs({
    "scorer": {"schemaRegistry": REGISTRY, "outputFormat": "avro"},
    "scorerGroups": [
        {**GROUP, "name": "clicks-r1"},  # the scorer-wide registry
        {**GROUP, "name": "clicks-r2", "clientRack": "r2", "outputFormat": "json",
         "schemaRegistry": {"url": "http://registry.r2:8080/apis/ccompat/v7",
                            "caSecret": ""}},
    ],
    "networkPolicy": {"schemaRegistry": [{"ports": [{"port": 8443, "protocol": "TCP"}]}]},
})


@pytest.fixture(scope="module")
def chart() -> Any:
    with helm.Chart.load(CHART) as c:
        yield c


def _pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["labels"]["headrace.io/group"]: d["spec"]["template"]["spec"]
            for d in docs if d["kind"] in ("Deployment", "StatefulSet")
            and d["metadata"]["labels"].get("app.kubernetes.io/component") == "scorer"}


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["containers"][0]["env"]}


def test_each_group_gets_its_registry_and_the_credentials_as_files(chart: Any) -> None:
    docs = render_docs(chart, VALUES)
    for doc in docs:
        validate_object(doc)
    pods = _pods(docs)
    r1, r2 = _env(pods["clicks-r1"]), _env(pods["clicks-r2"])
    assert r1["HEADRACE_SCHEMA_REGISTRY_URL"] == REGISTRY["url"]
    assert r1["HEADRACE_SCORER_OUTPUT_FORMAT"] == "avro"
    assert r1["HEADRACE_SCHEMA_REGISTRY_AUTH_FILE"] == "/etc/headrace/schema-registry-auth/auth"
    assert r1["HEADRACE_SCHEMA_REGISTRY_CA_FILE"] == "/etc/headrace/schema-registry-ca/ca.crt"
    # The group's keys win one by one: its URL and format, the scorer-wide auth Secret kept.
    assert r2["HEADRACE_SCHEMA_REGISTRY_URL"] == "http://registry.r2:8080/apis/ccompat/v7"
    assert r2["HEADRACE_SCORER_OUTPUT_FORMAT"] == "json"
    assert "HEADRACE_SCHEMA_REGISTRY_AUTH_FILE" in r2
    pod = pods["clicks-r1"]
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "schema-registry-auth", "mountPath": "/etc/headrace/schema-registry-auth",
            "readOnly": True} in mounts
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["schema-registry-auth"]["secret"] == {
        "secretName": "registry-auth", "items": [{"key": "auth", "path": "auth"}]}
    assert vols["schema-registry-ca"]["secret"]["secretName"] == "registry-ca"
    assert not kinds([d for d in docs if "registry" in d["metadata"]["name"]], "Secret")


def test_the_rendered_env_loads_as_the_scorers_settings(
        chart: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    pod = _pods(render_docs(chart, VALUES))["clicks-r2"]
    for name, value in _env(pod).items():
        if name.startswith("HEADRACE_") and not name.endswith("_FILE"):
            monkeypatch.setenv(name, value)
    assert load_settings().schema_registry_url == "http://registry.r2:8080/apis/ccompat/v7"
    assert load_scorer_settings().output_format == "json"


def test_without_a_registry_no_registry_setting_is_rendered(chart: Any) -> None:
    pods = _pods(render_docs(chart, with_dfs({"scorerGroups": [GROUP]})))
    env = _env(pods[GROUP["name"]])
    assert not [n for n in env if n.startswith("HEADRACE_SCHEMA_REGISTRY")]
    assert env["HEADRACE_SCORER_OUTPUT_FORMAT"] == "json"


def test_the_registrys_egress_is_on_the_scorers_policy_only(chart: Any) -> None:
    docs = render_docs(chart, VALUES)
    policies = {d["metadata"]["name"]: d for d in kinds(docs, "NetworkPolicy")}
    rule = {"ports": [{"port": 8443, "protocol": "TCP"}]}
    assert rule in policies["hr-headrace-scorer"]["spec"]["egress"]
    others = [p for n, p in policies.items() if n != "hr-headrace-scorer"]
    assert others and all(rule not in p["spec"]["egress"] for p in others)
    assert "registry-auth" not in yaml.safe_dump(policies)


@pytest.mark.parametrize("bad", [
    {"scorer": {"schemaRegistry": {"url": "http://user:pw@registry:8080"}}},
    {"scorer": {"schemaRegistry": {"url": "registry:8080"}}},
    {"scorer": {"schemaRegistry": {"password": "pw"}}},
    {"scorer": {"outputFormat": "xml"}},
    {"scorerGroups": [{**GROUP, "outputFormat": "protobuf"}]},
])
def test_the_values_schema_refuses_bad_registry_values(chart: Any, bad: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(chart.merge_values(with_dfs(bad)))
