"""A real node beside the kwok ones (tools/kube_node.py): a kubelet built from Kubernetes' own
source and containerd with runc on this machine. A pod from an image built here without a
registry is scheduled onto it, runs under Pod Security ``restricted``, and ends; what it printed
and its exit code come back through the API server, which reads the log from the kubelet."""

from __future__ import annotations

import http.server
import ipaddress
import os
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kube.conftest import Api, wait_for
from tools.kube_cluster import KubeCluster, KubeUnavailable
from tools.kube_node import (
    KERNEL_TUNABLES,
    TAINT,
    TOLERATION,
    RealNode,
    cgroup_hierarchies,
    node_bin,
    node_missing,
)

pytestmark = pytest.mark.slow


def _host_state() -> dict[str, Any]:
    """What the node must leave alone on the host: firewall rules, kernel settings, mounts."""
    rules = {}
    for tool in ("iptables", "ip6tables"):
        if shutil.which(tool):
            rules[tool] = [subprocess.run([tool, "-t", t, "-S"], capture_output=True, text=True,
                                          timeout=30).stdout for t in ("filter", "nat", "mangle")]
    return {"rules": rules,
            "sysctl": {k: Path(f"/proc/sys/{k}").read_text() for k in KERNEL_TUNABLES},
            "mounts": sorted(line.split()[1] for line in
                             Path("/proc/self/mounts").read_text().splitlines())}


@pytest.fixture(scope="module")
def host_before() -> dict[str, Any]:
    return _host_state()


@pytest.fixture(scope="module")
def real_node(kube: KubeCluster, api: Api, host_before: dict[str, Any]) -> Iterator[RealNode]:
    """One real node for this module, gone (processes, mounts, bridge, cgroups, Node) after."""
    why = node_missing()
    if why:
        pytest.skip(f"no real node here: {why}")
    if node_bin(kube.bin):
        if os.environ.get("HEADRACE_KUBE_BUILD", "1") == "0":
            pytest.skip("no real node here: not built and HEADRACE_KUBE_BUILD=0")
        pytest.fail("the real node is not built: run tools/kube_build.sh node (./dev test "
                    "runs it as root)")
    try:
        node = RealNode(kube, "real-node").start()
    except KubeUnavailable as exc:
        pytest.fail(f"the real node did not start: {exc}")
    yield node
    node.stop()
    api.request("DELETE", f"/api/v1/nodes/{node.name}")


def test_the_kubelet_registers_the_node_with_its_versions_and_address(
        real_node: RealNode, api: Api, kube: KubeCluster, host_before: dict[str, Any]) -> None:
    node = api.get(f"/api/v1/nodes/{real_node.name}")
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == kube.version  # built from the same tag as the API server
    assert info["containerRuntimeVersion"].startswith("containerd://")
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == real_node.address
    assert ipaddress.ip_address(real_node.address) in ipaddress.ip_network("10.88.0.0/16")
    assert {"key": TAINT["key"], "value": TAINT["value"], "effect": TAINT["effect"]} in [
        {k: t.get(k) for k in ("key", "value", "effect")} for t in node["spec"]["taints"]]
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True", ready
    # The host is as it was: no firewall rule, kernel setting or mount of the node's.
    assert _host_state() == host_before
    assert real_node.describe().startswith(
        f"node: {real_node.name} (real: kubelet {kube.version}, containerd://")


def _serve(address: str, body: bytes) -> tuple[http.server.ThreadingHTTPServer, int]:
    """An HTTP server on the host's bridge address: what a pod can reach of the host."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer((address, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, int(server.server_address[1])


# (busybox 1.35's `wget -T` segfaults: `timeout` bounds it instead.)
SCRIPT = """\
echo "pod=$POD_NAME uid=$(id -u) gid=$(id -g)"
echo "route: $(ip -4 route | tr '\\n' ';')"
echo "host says: $(timeout 10 wget -O- http://$HOST_IP:$PORT/ 2>/dev/null)"
test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo "token: mounted"
if touch /written 2>/dev/null; then echo "root: writable"; else echo "root: read-only"; fi
echo "tmp: $(echo x > /scratch/f && cat /scratch/f)"
exit 7
"""


def test_a_pod_from_a_locally_built_image_runs_to_its_end_on_the_real_node(
        real_node: RealNode, api: Api, kube: KubeCluster, namespace: str) -> None:
    greeting = secrets.token_hex(8).encode()
    server, port = _serve(real_node.address, greeting)
    try:
        api.create(f"/api/v1/namespaces/{namespace}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hello"},
            "spec": {
                "restartPolicy": "Never",
                "nodeSelector": {"kubernetes.io/hostname": real_node.name},
                "tolerations": [TOLERATION],
                "securityContext": {"runAsNonRoot": True, "runAsUser": 10001,
                                    "runAsGroup": 10001,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}],
                "containers": [{
                    "name": "c", "image": real_node.images["busybox"],
                    "imagePullPolicy": "Never",  # nothing to pull from: it was imported
                    "command": ["sh", "-c", SCRIPT],
                    "env": [
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {
                            "fieldPath": "metadata.name"}}},
                        {"name": "HOST_IP", "valueFrom": {"fieldRef": {
                            "fieldPath": "status.hostIP"}}},
                        {"name": "PORT", "value": str(port)}],
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                    "resources": {"limits": {"cpu": "100m", "memory": "32Mi"}},
                    "securityContext": {"allowPrivilegeEscalation": False,
                                        "readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]}}}]}})
        path = f"/api/v1/namespaces/{namespace}/pods/hello"

        def ended() -> Any:
            pod = api.get(path)
            return pod if pod["status"].get("phase") in ("Succeeded", "Failed") else None
        t0 = time.monotonic()
        pod = wait_for(ended, timeout_s=120, what="the pod to end on the real node")
        took = time.monotonic() - t0
    finally:
        server.shutdown()
        server.server_close()
    assert pod["spec"]["nodeName"] == real_node.name  # the scheduler bound it there
    assert pod["status"]["phase"] == "Failed"  # its exit code, not the node's doing
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 7 and term["reason"] == "Error", term
    assert pod["status"]["hostIP"] == real_node.address
    assert real_node.subnet is not None
    assert ipaddress.ip_address(pod["status"]["podIP"]) in real_node.subnet
    # The log through the API server, which reads it from the kubelet (its client
    # certificate, the kubelet's webhook authorization).
    status, log = kube.request("GET", f"{path}/log")
    assert status == 200, log
    text = str(log)
    lines = text.splitlines()
    assert "pod=hello uid=10001 gid=10001" in lines, text
    # One route: the bridge's subnet. No gateway, nowhere else to go.
    routes = [r.strip() for line in lines if line.startswith("route: ")
              for r in line.removeprefix("route: ").split(";") if r.strip()]
    assert len(routes) == 1 and routes[0].startswith(f"{real_node.subnet} dev eth0"), text
    assert f"host says: {greeting.decode()}" in lines, text
    assert "token: mounted" in lines, text
    assert "root: read-only" in lines, text
    assert "tmp: x" in lines, text
    print(f"pod ended {took:.1f}s after it was created")


def test_a_second_node_beside_the_first_runs_a_pod_and_stopping_it_ends_everything_of_its(
        real_node: RealNode, api: Api, kube: KubeCluster, namespace: str,
        host_before: dict[str, Any]) -> None:
    other = RealNode(kube, "real-node-2").start()
    try:
        assert other.subnet != real_node.subnet and other.cgroup != real_node.cgroup
        api.create(f"/api/v1/namespaces/{namespace}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "long"},
            "spec": {
                "nodeName": other.name, "tolerations": [TOLERATION],
                "securityContext": {"runAsNonRoot": True, "runAsUser": 10001,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "c", "image": other.images["busybox"], "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                    "securityContext": {"allowPrivilegeEscalation": False,
                                        "capabilities": {"drop": ["ALL"]}}}]}})
        wait_for(lambda: api.get(f"/api/v1/namespaces/{namespace}/pods/long")["status"].get(
            "phase") == "Running", timeout_s=60, what="the pod Running on the second node")
        running = other._cgroup_pids()
        assert running  # the sandbox and the sleep, in the node's own cgroups
    finally:
        other.stop()
        api.request("DELETE", f"/api/v1/nodes/{other.name}")
    for pid in running:  # the containers went with the node
        assert not Path(f"/proc/{pid}").exists() or \
            Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z", pid
    assert not other.root.exists()
    assert not any((h / other.cgroup.lstrip("/")).exists() for h in cgroup_hierarchies())
    assert other.bridge not in subprocess.run(["ip", "-o", "link"], capture_output=True,
                                              text=True, timeout=30).stdout
    assert _host_state() == host_before
    # The first node is untouched by the second's coming and going.
    ready = [c for c in api.get(f"/api/v1/nodes/{real_node.name}")["status"]["conditions"]
             if c["type"] == "Ready"]
    assert ready[0]["status"] == "True"
