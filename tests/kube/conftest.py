"""Fixtures on the run's real Kubernetes control plane (tests/real_kube.py): the API client,
the kwok nodes of tests/kube/inventory.py, and a fresh namespace per test enforcing the
``restricted`` Pod Security Standard."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from headrace.topology import kube_access
from tests import real_kube
from tests.kube import inventory
from tools.kube_cluster import KubeCluster


class Api:
    """Plain JSON requests on a kubernetes ``ApiClient`` (as the admin, or impersonating)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def request(self, method: str, path: str, body: Any = None, *,
                query: list[tuple[str, str]] | None = None,
                content_type: str = "application/json",
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
        from kubernetes.client.exceptions import ApiException

        h = {"Accept": "application/json", "Content-Type": content_type, **(headers or {})}
        req = self.client.param_serialize(method=method, resource_path=path,
                                          query_params=query or [], header_params=h, body=body,
                                          auth_settings=["BearerToken"])
        try:
            resp = self.client.call_api(*req)
            resp.read()
        except ApiException as exc:
            return int(exc.status or 0), {"message": str(exc.reason)}
        return int(resp.status), json.loads(resp.data) if resp.data else {}

    def get(self, path: str) -> Any:
        status, data = self.request("GET", path)
        return None if status == 404 else _ok(status, data, f"GET {path}")

    def create(self, path: str, body: Any) -> Any:
        status, data = self.request("POST", path, body)
        if status == 409:
            return None
        return _ok(status, data, f"POST {path}")

    def patch_status(self, path: str, status_body: dict[str, Any]) -> Any:
        status, data = self.request("PATCH", f"{path}/status", {"status": status_body},
                                    content_type="application/merge-patch+json")
        return _ok(status, data, f"PATCH {path}/status")

    def items(self, path: str, **query: str) -> list[dict[str, Any]]:
        status, data = self.request("GET", path, query=list(query.items()))
        return list(_ok(status, data, f"GET {path}").get("items") or [])


def _ok(status: int, data: Any, what: str) -> Any:
    assert 200 <= status < 300, f"{what}: {status} {data.get('message') if data else ''}"
    return data


def wait_for(cond: Callable[[], Any], *, timeout_s: float = 60.0, what: str = "condition",
             every_s: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


@pytest.fixture(scope="session")
def kube() -> KubeCluster:
    """The run's control plane with the inventory's kwok nodes Ready."""
    cluster = real_kube.cluster()
    api = Api(kube_access.api_client(environ={"KUBECONFIG": str(cluster.kubeconfig)}))
    for n in inventory.NODES:
        api.create("/api/v1/nodes", inventory.node_manifest(n))

    def ready() -> bool:
        nodes = api.items("/api/v1/nodes", labelSelector="type=kwok")
        return len(nodes) == len(inventory.NODES) and all(
            any(c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions", [])) for n in nodes)

    wait_for(ready, timeout_s=60, what="kwok to make the nodes Ready")
    return cluster


@pytest.fixture(scope="session")
def kubeconfig(kube: KubeCluster) -> Path:
    return kube.kubeconfig


@pytest.fixture(scope="session")
def api_client(kube: KubeCluster) -> Any:
    """A kubernetes ``ApiClient`` as the cluster admin."""
    return kube_access.api_client(environ={"KUBECONFIG": str(kube.kubeconfig)})


@pytest.fixture(scope="session")
def api(api_client: Any) -> Api:
    return Api(api_client)


@pytest.fixture
def namespace(api: Api) -> Iterator[str]:
    """A fresh namespace enforcing Pod Security ``restricted`` (as Headrace's are), its claims
    and volumes in place; deleted afterwards."""
    ns = f"hr-{uuid.uuid4().hex[:8]}"
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": ns, "labels": {"pod-security.kubernetes.io/enforce": "restricted",
                               "pod-security.kubernetes.io/enforce-version": "latest"}}})
    for obj in inventory.volume_objects(ns):
        path = ("/api/v1/persistentvolumes" if obj["kind"] == "PersistentVolume"
                else f"/api/v1/namespaces/{ns}/persistentvolumeclaims")
        api.create(path, obj)
    yield ns
    api.request("DELETE", f"/api/v1/namespaces/{ns}")
    for obj in inventory.volume_objects(ns):
        if obj["kind"] == "PersistentVolume":
            api.request("DELETE", f"/api/v1/persistentvolumes/{obj['metadata']['name']}")


@pytest.fixture
def applied(tmp_path: Path, api_client: Any, namespace: str) -> str:
    """The chart applied to the namespace (its ServiceAccounts, Role and RoleBinding)."""
    from headrace.topology import commands

    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(inventory.cluster_file()))
    commands.run_apply(cluster_path=path, namespace=namespace, api_client=api_client)
    return namespace
