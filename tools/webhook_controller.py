"""A Kubernetes controller with admission webhooks (Kueue, JobSet: built by tools/kube_build.sh)
run beside a :class:`KubeCluster`: its CRDs and webhook configurations as its own manifests
install them, except that the API server reaches the webhooks at a loopback URL instead of
through a Service (the test cluster has no pod network). The serving certificate is made here
for both the Service's DNS name and 127.0.0.1, signed by a CA of the controller's own.

Installing one changes the cluster for every namespace (its webhooks see every object of
their kinds); :meth:`WebhookController.stop` removes what it installed, webhooks first.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from headrace.core.child_process import die_with_parent
from headrace.core.ports import free_port
from tools.kube_cluster import KubeCluster, KubeUnavailable, _openssl


class WebhookController:
    """Subclasses name the controller and build its configuration file."""

    name = ""  # the binary, and the folder of its manifests beside the bin folder
    namespace = ""
    service = ""  # the webhook Service its certificate names
    ca_name = "webhook-ca"
    kept_paths: tuple[str, ...] = ()  # webhook paths installed (the others are not served)
    converted: tuple[str, ...] = ()  # CRD plurals whose conversion webhook it serves
    inject_ca = True  # False: the controller injects its CA itself
    probe_path = ""  # a dry-run create here passes through its webhooks once they answer
    probe_body: dict[str, Any] = {}

    def __init__(self, cluster: KubeCluster) -> None:
        d = cluster.bin.parent / self.name
        if not (cluster.bin / self.name).is_file() or not (d / "webhooks.yaml").is_file():
            raise KubeUnavailable(f"{self.name} is not built (tools/kube_build.sh builds it)")
        self.cluster = cluster
        self.assets = d
        self.version = (d / "version").read_text().strip()
        self.root = cluster.root / self.name
        self.webhook_port = 0
        self.health_port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.pki: dict[str, bytes] = {}

    @property
    def log_path(self) -> Path:
        return self.root / f"{self.name}.log"

    @property
    def cert_dir(self) -> Path:
        return self.root / "certs"

    # -- what subclasses add ----------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        raise NotImplementedError

    def install_first(self) -> None:
        """Objects the controller needs before it starts (beyond CRDs and webhooks)."""

    # -- the API ----------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, *,
                timeout_s: float = 30.0) -> tuple[int, Any]:
        c = self.cluster
        req = urllib.request.Request(
            f"{c.server}{path}", method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {c.admin_token}",
                     "Content-Type": "application/json", "Accept": "application/json"})
        ctx = ssl.create_default_context(cafile=str(c.root / "pki" / "ca.crt"))
        try:
            with urllib.request.urlopen(req, timeout=timeout_s, context=ctx) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    def create(self, path: str, obj: dict[str, Any]) -> None:
        status, data = self.request("POST", path, obj)
        if status not in (200, 201, 409):
            raise KubeUnavailable(f"creating {obj['kind']} {obj['metadata']['name']}: "
                                  f"{status} {data.get('message')}")

    # -- install ----------------------------------------------------------------------------

    def _make_pki(self) -> None:
        d = self.root / "pki"
        d.mkdir(parents=True, exist_ok=True)
        # Ten years, the CA named as a DNS name too: what a cert rotator (Kueue's) checks
        # before it would replace them (a 90-day lookahead).
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj",
                 f"/O={self.name}/CN={self.ca_name}", "-addext",
                 f"subjectAltName=DNS:{self.ca_name}",
                 "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"))
        dns = f"{self.service}.{self.namespace}.svc"
        (d / "san.ext").write_text(f"subjectAltName=DNS:{dns},IP:127.0.0.1\n"
                                   "extendedKeyUsage=serverAuth\n"
                                   "keyUsage=digitalSignature,keyEncipherment\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={dns}",
                 "-keyout", str(d / "tls.key"), "-out", str(d / "tls.csr"))
        _openssl("x509", "-req", "-in", str(d / "tls.csr"), "-CA", str(d / "ca.crt"),
                 "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-days", "3650",
                 "-extfile", str(d / "san.ext"), "-out", str(d / "tls.crt"))
        # PKCS#1 ("RSA PRIVATE KEY"), as cert-controller writes and reads them.
        for name in ("ca.key", "tls.key"):
            _openssl("rsa", "-in", str(d / name), "-traditional", "-out", str(d / name))
        self.pki = {n: (d / n).read_bytes() for n in ("ca.crt", "ca.key", "tls.crt", "tls.key")}
        self.cert_dir.mkdir(exist_ok=True)
        for n in ("tls.crt", "tls.key"):  # a pod would mount its Secret here
            (self.cert_dir / n).write_bytes(self.pki[n])

    def _client_config(self, path: str) -> dict[str, Any]:
        out: dict[str, Any] = {"url": f"https://127.0.0.1:{self.webhook_port}{path}"}
        if self.inject_ca:
            out["caBundle"] = base64.b64encode(self.pki["ca.crt"]).decode()
        return out

    def crds(self) -> list[dict[str, Any]]:
        out = []
        for p in sorted((self.assets / "crds").glob("*.yaml")):
            crd = yaml.safe_load(p.read_text())
            if crd["spec"]["names"]["plural"] in self.converted:
                crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                    "clientConfig": self._client_config("/convert"),
                    "conversionReviewVersions": ["v1"]}}
            out.append(crd)
        return out

    def webhooks(self) -> list[dict[str, Any]]:
        """Its webhook configurations, named as its kustomization names them
        (``<name>-mutating-webhook-configuration``), each kept hook called at a URL."""
        out = []
        for doc in yaml.safe_load_all((self.assets / "webhooks.yaml").read_text()):
            if not doc:
                continue
            kind = "mutating" if doc["kind"].startswith("Mutating") else "validating"
            doc["metadata"] = {"name": f"{self.name}-{kind}-webhook-configuration"}
            kept = []
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                if any(k in path for k in self.kept_paths):
                    hook["clientConfig"] = self._client_config(path)
                    kept.append(hook)
            doc["webhooks"] = kept
            out.append(doc)
        return out

    def start(self, *, timeout_s: float = 120.0) -> WebhookController:
        deadline = time.monotonic() + timeout_s
        self.root.mkdir(parents=True, exist_ok=True)
        self.webhook_port, self.health_port = free_port(), free_port()
        try:
            self._make_pki()
            self.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": self.namespace}})
            self.install_first()
            for crd in self.crds():
                self.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
            for hook in self.webhooks():
                self.create(f"/apis/admissionregistration.k8s.io/v1/{hook['kind'].lower()}s",
                            hook)
            config = self.root / "config.yaml"
            config.write_text(yaml.safe_dump(self.config()))
            log = open(self.log_path, "ab")  # noqa: SIM115 - the child holds it
            self.proc = subprocess.Popen(
                [str(self.cluster.bin / self.name), "--config", str(config)],
                env={**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig)},
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent)
            log.close()
            self._wait(self._ready, deadline, f"{self.name} ready (its webhooks answering)")
        except BaseException:
            self.stop()
            raise
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz",
                                        timeout=3) as resp:
                if resp.status != 200:
                    return False
        except (urllib.error.URLError, OSError):
            return False
        # The API server calls the webhooks once they serve (and their CA is in place).
        status, _ = self.request("POST", f"{self.probe_path}?dryRun=All", self.probe_body)
        return status == 201

    def _wait(self, ok: Any, deadline: float, what: str) -> None:
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise KubeUnavailable(f"{self.name} exited with {self.proc.returncode}:\n"
                                      f"{self.log_tail()}")
            if ok():
                return
            time.sleep(0.5)
        raise KubeUnavailable(f"timed out waiting for {what}\n{self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Uninstall (webhooks first: with the controller gone they would refuse every object
        they see), then stop the controller."""
        with contextlib.suppress(OSError):  # the API server may be gone already (Ctrl-C)
            for kind in ("mutating", "validating"):
                self.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{kind}"
                             f"webhookconfigurations/{self.name}-{kind}-webhook-configuration",
                             timeout_s=5)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None
        with contextlib.suppress(OSError):
            for p in sorted((self.assets / "crds").glob("*.yaml")):
                name = yaml.safe_load(p.read_text())["metadata"]["name"]
                self.request("DELETE", "/apis/apiextensions.k8s.io/v1/"
                             f"customresourcedefinitions/{name}", timeout_s=5)
            self.request("DELETE", f"/api/v1/namespaces/{self.namespace}", timeout_s=5)
