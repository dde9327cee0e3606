"""Every Kubernetes configuration problem is one line naming what is wrong: a malformed or
incomplete kubeconfig, a pod without its service account token, no configuration at all, an
API server that is not there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from headrace.core.errors import ConfigError, RetriableError
from headrace.topology.kube_access import api_client
from headrace.topology.kube_rest import Ref, Rest


def kubeconfig(server: str = "https://127.0.0.1:1", **user: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "k", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": user or {"token": "t0ken"}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}


def write(tmp_path: Path, data: Any) -> dict[str, str]:
    path = tmp_path / "kubeconfig"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return {"KUBECONFIG": str(path), "HOME": str(tmp_path)}


@pytest.mark.parametrize(("text", "message"), [
    ("clusters: [\n  - {name: k\n", r"kubeconfig .*/kubeconfig is not valid YAML at line \d"),
    ("- just\n- a list\n", "is not a kubeconfig"),
    (kubeconfig() | {"current-context": "prod"}, r"kubeconfig .*: .*prod"),
    (kubeconfig() | {"contexts": []}, r"kubeconfig .*/kubeconfig"),
    (kubeconfig(**{"client-certificate-data": "%%%not-base64"}), r"kubeconfig .*kubeconfig"),
])
def test_a_bad_kubeconfig_is_one_line_naming_the_file(tmp_path: Path, text: Any,
                                                      message: str) -> None:
    env = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as info:
        api_client(environ=env, sa_dir=tmp_path / "sa")
    assert "\n" not in str(info.value)


def test_an_unknown_context_is_named(tmp_path: Path) -> None:
    env = write(tmp_path, kubeconfig())
    with pytest.raises(ConfigError, match="staging") as info:
        api_client(context="staging", environ=env, sa_dir=tmp_path / "sa")
    assert "\n" not in str(info.value)


def test_in_a_pod_without_a_token_the_token_is_blamed(tmp_path: Path) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "ca.crt").write_text("x")
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
           "HOME": str(tmp_path)}
    with pytest.raises(ConfigError) as info:
        api_client(environ=env, sa_dir=sa)
    msg = str(info.value)
    assert f"token {sa / 'token'} is missing" in msg and "automountServiceAccountToken" in msg
    assert "KUBERNETES_SERVICE_HOST" not in msg and "\n" not in msg


def test_in_a_pod_with_a_token_the_client_points_at_the_service(tmp_path: Path) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("abc")
    (sa / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
           "HOME": str(tmp_path)}
    api = api_client(environ=env, sa_dir=sa)
    assert api.configuration.host == "https://10.96.0.1:443"
    assert api.configuration.api_key["BearerToken"] == "bearer abc"
    del env["KUBERNETES_SERVICE_PORT"]
    with pytest.raises(ConfigError, match=r"in-cluster .*host/port"):
        api_client(environ=env, sa_dir=sa)


def test_no_configuration_at_all_names_both_sources(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        api_client(environ={"HOME": str(tmp_path)}, sa_dir=tmp_path / "sa")
    msg = str(info.value)
    assert f"no kubeconfig at {tmp_path / '.kube/config'}" in msg
    assert "KUBERNETES_SERVICE_HOST is unset" in msg


def test_a_good_kubeconfig_wins_over_the_pod(tmp_path: Path) -> None:
    env = write(tmp_path, kubeconfig(server="https://api.example:6443"))
    env["KUBERNETES_SERVICE_HOST"] = "10.96.0.1"  # and no token: not consulted
    assert api_client(environ=env, sa_dir=tmp_path / "sa").configuration.host == (
        "https://api.example:6443")


def test_an_unreachable_api_server_is_a_retriable_one_liner_naming_it(tmp_path: Path) -> None:
    env = write(tmp_path, kubeconfig(server="https://127.0.0.1:1"))
    api = api_client(environ=env, sa_dir=tmp_path / "sa")
    api.configuration.retries = 0
    with pytest.raises(RetriableError) as info:
        Rest(api).get(Ref("apps", "StatefulSet", "ml", "s"))
    msg = str(info.value)
    assert msg.startswith("Kubernetes API server https://127.0.0.1:1 unreachable "
                          "(reading StatefulSet/s)")
    assert "\n" not in msg


def test_cli_apply_with_a_malformed_kubeconfig_prints_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    three_racks: dict[str, Any],
) -> None:
    from headrace.cli import main

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(three_racks))
    env = write(tmp_path, "apiVersion: v1\nclusters: {{{\n")
    monkeypatch.setenv("KUBECONFIG", env["KUBECONFIG"])
    assert main(["topology", "apply", "--cluster", str(cluster), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "kubeconfig" in err and "is not valid YAML at line" in err



def test_a_refused_request_names_the_object_and_the_servers_reason() -> None:
    import json as _json

    import urllib3
    from kubernetes.client import rest

    from tests.topology.fake_api import FakeApiServer, fake_client

    class Forbidding(FakeApiServer):
        def request(self, method: str, url: str, headers: dict[str, str] | None = None,
                    body: Any = None, **kw: Any) -> Any:
            if method != "POST":
                return super().request(method, url, headers, body, **kw)
            msg = {"kind": "Status", "message": 'statefulsets.apps is forbidden: User "dev" '
                   'cannot create resource "statefulsets"\nin the namespace "ml"'}
            return rest.RESTResponse(urllib3.HTTPResponse(
                body=_json.dumps(msg).encode(), status=403, preload_content=True,
                headers={"Content-Type": "application/json"}))

    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "s", "namespace": "ml"}}
    with pytest.raises(ConfigError) as info:
        Rest(fake_client(Forbidding())).create(sts)
    msg = str(info.value)
    assert msg.startswith("Kubernetes API refused creating StatefulSet/s (403): "
                          "statefulsets.apps is forbidden")
    assert "\n" not in msg
