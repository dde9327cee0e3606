"""A real Kubernetes control plane on loopback, from the binaries tools/kube_build.sh builds:
etcd, kube-apiserver (RBAC, ServiceAccount tokens signed with a key made here, PodSecurity
admission), kube-controller-manager (the Job, ServiceAccount and garbage controllers),
kube-scheduler and kwok (simulated nodes; pods become Running and stay so until a test sets
their outcome).

Tests import :class:`KubeCluster`; ``./dev kube`` runs one (tools/kube_stack.py). The
controllers with webhooks (tools/webhook_controller.py) build on this module, never it on them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headrace.core.child_process import die_with_parent
from headrace.core.ports import free_port

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "kube_build.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# Namespaces whose pods must pass the `restricted` Pod Security Standard.
RESTRICTED = "restricted"


class KubeUnavailable(RuntimeError):
    """Go is missing, or the binaries cannot be built or started."""


def go_missing() -> str | None:
    return None if shutil.which("go") else "go (1.25+) not installed"


def cached_bin() -> Path | None:
    """The cached bin folder when every binary is there (no build)."""
    version = os.environ.get("KUBE_VERSION", "v1.36.3")
    root = Path(os.environ.get("HEADRACE_KUBE_CACHE")
                or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                / "headrace" / "kube")
    dest = root / version
    if (dest / ".complete").is_file() and all((dest / "bin" / b).is_file() for b in BINARIES):
        return dest / "bin"
    return None


def resolve_bin(*, build: bool = True) -> Path:
    """The folder holding the binaries (built on first use, which takes many minutes)."""
    found = cached_bin()
    if found is not None or not build:
        if found is None:
            raise KubeUnavailable("the Kubernetes binaries are not built (tools/kube_build.sh)")
        return found
    why = go_missing()
    if why:
        raise KubeUnavailable(why)
    out = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True,
                         timeout=5400)
    if out.returncode != 0:
        raise KubeUnavailable(f"tools/kube_build.sh failed: {out.stderr.strip()[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def _etcd_minor(etcd: Path) -> int:
    """etcd's minor version (3.4 -> 4): 3.5 added --unsafe-no-fsync."""
    out = subprocess.run([str(etcd), "--version"], capture_output=True, text=True, timeout=30)
    for word in out.stdout.split():
        if word.startswith("3."):
            return int(word.split(".")[1])
    return 0


def _openssl(*args: str) -> None:
    out = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise KubeUnavailable(f"openssl {args[0]} failed: {out.stderr.strip()[-500:]}")


def make_pki(d: Path) -> None:
    """A CA, the API server's serving certificate (127.0.0.1, localhost, kubernetes.default)
    and the ServiceAccount token signing key pair."""
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj",
             "/CN=headrace-test-ca", "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"))
    ext = d / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,"
                   "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
                   "extendedKeyUsage=serverAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kube-apiserver",
             "-keyout", str(d / "apiserver.key"), "-out", str(d / "apiserver.csr"))
    _openssl("x509", "-req", "-in", str(d / "apiserver.csr"), "-CA", str(d / "ca.crt"),
             "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-days", "30", "-extfile", str(ext),
             "-out", str(d / "apiserver.crt"))
    _openssl("genrsa", "-out", str(d / "sa.key"), "2048")
    _openssl("rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub"))
    # The API server's identity towards kubelets (logs, exec): a real node's kubelet checks it
    # against this CA and asks the API server whether the user may (webhook authorization).
    client_cert(d, "apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters")


def client_cert(pki: Path, name: str, user: str, group: str) -> tuple[Path, Path]:
    """A client certificate for ``user`` in ``group`` signed by the cluster's CA (the API server
    takes CN as the user and O as the group): ``pki/NAME.crt`` and ``pki/NAME.key``."""
    crt, key, csr = pki / f"{name}.crt", pki / f"{name}.key", pki / f"{name}.csr"
    ext = pki / f"{name}.ext"
    ext.write_text("extendedKeyUsage=clientAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/O={group}/CN={user}",
             "-keyout", str(key), "-out", str(csr))
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"), "-CAkey",
             str(pki / "ca.key"), "-CAcreateserial", "-days", "30", "-extfile", str(ext),
             "-out", str(crt))
    return crt, key


@dataclass
class Component:
    name: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        log.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def log_tail(self, chars: int = 2500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class KubeCluster:
    """etcd + kube-apiserver + controller-manager + scheduler + kwok under one folder."""

    def __init__(self, root: Path | None = None, *, bin_dir: Path | None = None,
                 apiserver_args: Sequence[str] = (), controllers: bool = True) -> None:
        """``apiserver_args``: more kube-apiserver flags; ``controllers=False``: etcd and the
        API server only (no controller-manager, scheduler or kwok)."""
        self._own_root = root is None
        self.apiserver_args = list(apiserver_args)
        self.controllers = controllers
        self.root = root or Path(tempfile.mkdtemp(prefix="headrace-kube-"))
        self.bin = bin_dir or resolve_bin()
        self.components: dict[str, Component] = {}
        self.port = 0
        self.etcd_port = 0
        self.admin_token = secrets.token_hex(16)
        self.started_s = 0.0

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    @property
    def version(self) -> str:
        return self.bin.parent.name

    def write_kubeconfig(self, path: Path, token: str) -> None:
        """A kubeconfig for this server acting with ``token``."""
        ca = base64.b64encode((self.root / "pki" / "ca.crt").read_bytes()).decode()
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "headrace-test",
            "clusters": [{"name": "headrace-test", "cluster": {
                "server": self.server, "certificate-authority-data": ca}}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "headrace-test",
                          "context": {"cluster": "headrace-test", "user": "u"}}]}))
        path.chmod(0o600)

    def _prepare(self) -> None:
        pki = self.root / "pki"
        make_pki(pki)
        self.etcd_port, peer, self.port = free_port(), free_port(), free_port()
        tokens = {"admin": self.admin_token, "scheduler": secrets.token_hex(16),
                  "cm": secrets.token_hex(16), "kwok": secrets.token_hex(16)}
        (self.root / "tokens.csv").write_text(
            f'{tokens["admin"]},headrace-admin,uid-admin,"system:masters"\n'
            f'{tokens["scheduler"]},system:kube-scheduler,uid-scheduler\n'
            # Its controllers act under its own name (no per-controller accounts): all rights.
            f'{tokens["cm"]},system:kube-controller-manager,uid-cm,"system:masters"\n'
            f'{tokens["kwok"]},kwok,uid-kwok,"system:masters"\n')
        self.write_kubeconfig(self.kubeconfig, tokens["admin"])
        for who in ("scheduler", "cm", "kwok"):
            self.write_kubeconfig(self.root / f"{who}.kubeconfig", tokens[who])
        b, r = self.bin, self.root
        c = self.components
        c["etcd"] = Component("etcd", [
            str(b / "etcd"), "--name", "test", "--data-dir", str(r / "etcd"),
            "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"test=http://127.0.0.1:{peer}",
            *(["--unsafe-no-fsync"] if _etcd_minor(b / "etcd") >= 5 else []),
            "--log-level", "warn", "--quota-backend-bytes", str(2 << 30)],
            r / "etcd.log")
        c["kube-apiserver"] = Component("kube-apiserver", [
            str(b / "kube-apiserver"), "--etcd-servers", self.etcd_url,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", str(self.port),
            "--tls-cert-file", str(pki / "apiserver.crt"),
            "--tls-private-key-file", str(pki / "apiserver.key"),
            "--client-ca-file", str(pki / "ca.crt"),
            "--token-auth-file", str(r / "tokens.csv"),
            # Node: a real node's kubelet (tools/kube_node.py) reads and writes what its pods
            # need, as on any cluster; the kwok nodes need no rights of their own.
            "--authorization-mode", "Node,RBAC",
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(pki / "sa.pub"),
            "--service-account-signing-key-file", str(pki / "sa.key"),
            "--api-audiences", "https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range", "10.96.0.0/16",
            "--enable-admission-plugins", "NamespaceLifecycle,ServiceAccount,PodSecurity,"
            "LimitRanger,ResourceQuota,DefaultTolerationSeconds,DefaultStorageClass,"
            "NodeRestriction",
            "--kubelet-client-certificate", str(pki / "apiserver-kubelet-client.crt"),
            "--kubelet-client-key", str(pki / "apiserver-kubelet-client.key"),
            "--allow-privileged=false", "--profiling=false", "--cert-dir", str(pki),
            "--endpoint-reconciler-type", "none",
            # Pod logs come from kwok's kubelet API on the node's InternalIP (127.0.0.1); the
            # nodes' Hostname addresses do not resolve.
            "--kubelet-preferred-address-types", "InternalIP",
            "--v", "1", *self.apiserver_args],
            r / "kube-apiserver.log")
        c["kube-controller-manager"] = Component("kube-controller-manager", [
            str(b / "kube-controller-manager"), "--kubeconfig", str(r / "cm.kubeconfig"),
            "--authentication-kubeconfig", str(r / "cm.kubeconfig"),
            "--authorization-kubeconfig", str(r / "cm.kubeconfig"),
            "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
            "--leader-elect=false", "--use-service-account-credentials=false",
            "--service-account-private-key-file", str(pki / "sa.key"),
            "--root-ca-file", str(pki / "ca.crt"),
            "--concurrent-job-syncs", "5", "--v", "1"],
            r / "kube-controller-manager.log")
        c["kube-scheduler"] = Component("kube-scheduler", [
            str(b / "kube-scheduler"), "--kubeconfig", str(r / "scheduler.kubeconfig"),
            "--authentication-kubeconfig", str(r / "scheduler.kubeconfig"),
            "--authorization-kubeconfig", str(r / "scheduler.kubeconfig"),
            "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
            "--leader-elect=false", "--v", "1"],
            r / "kube-scheduler.log")
        stages = self.bin.parent / "stages"
        configs = [*sorted(stages.glob("*.yaml")), self._logs_config()]
        kubelet = free_port()
        c["kwok"] = Component("kwok", [
            str(b / "kwok"), "--kubeconfig", str(r / "kwok.kubeconfig"),
            "--config", ",".join(str(p) for p in configs),
            "--manage-all-nodes=false", "--manage-nodes-with-label-selector", "type=kwok",
            "--node-lease-duration-seconds", "40", "--cidr", "10.244.0.0/16",
            # Every node's kubelet API (logs) is kwok's server: the API server reaches it at
            # the node's InternalIP and kubelet port, over TLS it does not verify.
            "--node-ip", "127.0.0.1", "--node-port", str(kubelet),
            "--server-address", f"127.0.0.1:{kubelet}",
            "--tls-cert-file", str(pki / "apiserver.crt"),
            "--tls-private-key-file", str(pki / "apiserver.key")],
            r / "kwok.log")

    @property
    def pod_log(self) -> Path:
        """The log every kwok pod's containers serve (the kubelet's CRI log format)."""
        return self.root / "pod-logs" / "containers.log"

    def _logs_config(self) -> Path:
        self.pod_log.parent.mkdir(parents=True, exist_ok=True)
        self.pod_log.touch()
        path = self.root / "kwok-logs.yaml"
        path.write_text(json.dumps({
            "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs",
            "metadata": {"name": "every-pod"},
            "spec": {"selector": {}, "logs": [{"logsFile": str(self.pod_log),
                                               "follow": False}]}}))
        return path

    def write_pod_log(self, lines: Sequence[str]) -> None:
        """What every pod's container printed (stdout, stamped now): what the API server's
        pod log endpoint returns through kwok from now on."""
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
        frac = f"{now % 1:.9f}"[1:]
        self.pod_log.write_text("".join(f"{stamp}{frac}Z stdout F {line}\n" for line in lines))

    def start(self, *, timeout_s: float = 180.0) -> KubeCluster:
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        try:
            self._prepare()
            self.components["etcd"].start()
            self._wait(lambda: self._http(f"{self.etcd_url}/health", tls=False), deadline,
                       "etcd healthy")
            self.components["kube-apiserver"].start()
            self._wait(lambda: self._http(f"{self.server}/readyz"), deadline,
                       "kube-apiserver ready")
            if not self.controllers:
                for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
                    del self.components[name]
                self._wait(lambda: self._http(f"{self.server}/api/v1/namespaces/default"),
                           deadline, "the default namespace")
            else:
                for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
                    self.components[name].start()
                # The default ServiceAccount appears once the controller-manager runs its
                # controllers.
                self._wait(lambda: self._http(
                    f"{self.server}/api/v1/namespaces/default/serviceaccounts/default"),
                    deadline, "the controller-manager's ServiceAccount controller")
        except BaseException:
            self.stop()
            raise
        self.started_s = time.monotonic() - t0
        return self

    def _http(self, url: str, *, tls: bool = True) -> bool:
        req = urllib.request.Request(url)
        ctx = None
        if tls:
            req.add_header("Authorization", f"Bearer {self.admin_token}")
            ctx = ssl.create_default_context(cafile=str(self.root / "pki" / "ca.crt"))
        try:
            with urllib.request.urlopen(req, timeout=3, context=ctx) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def request(self, method: str, path: str, body: Any = None, *,
                content_type: str = "application/json",
                timeout_s: float = 30.0) -> tuple[int, Any]:
        """One API request as the admin: its status and body (JSON decoded; else text)."""
        req = urllib.request.Request(
            f"{self.server}{path}", method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.admin_token}",
                     "Content-Type": content_type, "Accept": "application/json, */*"})
        ctx = ssl.create_default_context(cafile=str(self.root / "pki" / "ca.crt"))
        try:
            with urllib.request.urlopen(req, timeout=timeout_s, context=ctx) as resp:
                status, raw = int(resp.status), resp.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        try:
            return status, json.loads(raw) if raw else {}
        except ValueError:
            return status, raw.decode(errors="replace")

    def add_kwok_nodes(self, nodes: Sequence[dict[str, Any]] | None = None, *,
                       timeout_s: float = 60.0) -> list[str]:
        """Register simulated nodes (default: tools/kwok_nodes.py's GPU and CPU nodes) and wait
        until kwok reports them Ready; returns their names."""
        from tools.kwok_nodes import NODES, node_manifest, ready

        names = []
        for n in NODES if nodes is None else nodes:
            status, data = self.request("POST", "/api/v1/nodes", node_manifest(n))
            if status not in (201, 409):
                raise KubeUnavailable(f"creating node {n['name']}: {status} {data}")
            names.append(n["name"])

        def all_ready() -> bool:
            status, data = self.request("GET", "/api/v1/nodes?labelSelector=type%3Dkwok")
            have = {i["metadata"]["name"] for i in data.get("items", []) if ready(i)} \
                if status == 200 else set()
            return set(names) <= have
        self._wait(all_ready, time.monotonic() + timeout_s, "kwok to make its nodes Ready")
        return names

    def _wait(self, ok: Any, deadline: float, what: str) -> None:
        while time.monotonic() < deadline:
            self._check_alive()
            if ok():
                return
            time.sleep(0.25)
        raise KubeUnavailable(f"timed out waiting for {what}\n{self.log_tails()}")

    def _check_alive(self) -> None:
        for c in self.components.values():
            if c.proc is not None and c.proc.poll() is not None:
                raise KubeUnavailable(f"{c.name} exited with {c.proc.returncode}:\n"
                                      f"{c.log_tail()}")

    def log_tails(self, chars: int = 2000) -> str:
        return "\n".join(f"--- {c.name}\n{c.log_tail(chars)}" for c in self.components.values())

    def keep_logs(self, dest: Path) -> Path:
        dest.mkdir(parents=True, exist_ok=True)
        # Its components', and those of controllers run beside it (tools/webhook_controller.py).
        for path in [c.log_path for c in self.components.values()] + sorted(
                self.root.glob("*/*.log")):
            with contextlib.suppress(OSError):
                shutil.copy(path, dest / path.name)
        return dest

    def restart_apiserver(self, *, sig: int = signal.SIGKILL, timeout_s: float = 120.0) -> None:
        """Kill the API server (SIGKILL: no graceful shutdown) and start it again on the same
        port and etcd; returns once it is ready. Its watch cache starts anew from etcd."""
        api = self.components["kube-apiserver"]
        api.stop(sig)
        api.start()
        self._wait(lambda: self._http(f"{self.server}/readyz"), time.monotonic() + timeout_s,
                   "kube-apiserver ready after a restart")

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (what the API server does every
        five minutes); returns that revision."""
        def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
            req = urllib.request.Request(f"{self.etcd_url}{path}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as resp:
                return dict(json.loads(resp.read()))
        rev = int(post("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})
                  ["header"]["revision"])
        post("/v3/kv/compaction", {"revision": str(rev), "physical": True})
        return rev

    def stop(self) -> None:
        for name in ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver",
                     "etcd"):
            c = self.components.get(name)
            if c is not None:
                c.stop()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> KubeCluster:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
