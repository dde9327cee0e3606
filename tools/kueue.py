"""Kueue (sigs.k8s.io/kueue) beside a :class:`KubeCluster` (see tools/webhook_controller.py):
gang admission of whole Jobs and JobSets against a queue's quota.

Kueue's own certificate management runs (its production path): it finds its webhook Secret
already holding the CA and serving certificate made here, checks them, injects the CA into its
webhook configurations and conversion CRDs, and serves with the files in its cert folder.
"""

from __future__ import annotations

import base64
from typing import Any

from tools.kube_cluster import KubeCluster
from tools.webhook_controller import WebhookController


class Kueue(WebhookController):
    """Kueue's controller; ``pods_ready_s`` turns on ``waitForPodsReady``; ``jobset`` also
    admits JobSets (their CRD and controller installed: tools/jobset.py)."""

    name = "kueue"
    namespace = "kueue-system"
    service = "kueue-webhook-service"  # its default; its webhook configurations are "kueue-..."
    ca_name = "kueue-ca"
    secret = "kueue-webhook-server-cert"
    converted = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
    inject_ca = False  # its cert rotator does
    probe_path = "/apis/kueue.x-k8s.io/v1beta2/resourceflavors"
    probe_body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                  "metadata": {"name": "readiness-probe"}}

    def __init__(self, cluster: KubeCluster, *, pods_ready_s: int | None = None,
                 jobset: bool = False) -> None:
        super().__init__(cluster)
        self.pods_ready_s = pods_ready_s
        self.frameworks = ["batch/job", *(["jobset.x-k8s.io/jobset"] if jobset else [])]
        # Kueue's own kinds and the integrations on (the others' handlers are not served).
        self.kept_paths = ("-kueue-x-k8s-io-", "-batch-v1-job",
                           *(["-jobset-x-k8s-io-"] if jobset else []))

    def install_first(self) -> None:
        self.create(f"/api/v1/namespaces/{self.namespace}/secrets", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": self.secret},
            "data": {k: base64.b64encode(v).decode() for k, v in self.pki.items()}})

    def config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
            "namespace": self.namespace,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": self.webhook_port, "host": "127.0.0.1",
                        "certDir": str(self.cert_dir)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": True},
            "integrations": {"frameworks": self.frameworks},
            # Its visibility API server needs in-cluster credentials (and an APIService).
            "featureGates": {"VisibilityOnDemand": False},
        }
        if self.pods_ready_s is not None:
            cfg["waitForPodsReady"] = {"timeout": f"{self.pods_ready_s}s",
                                       "blockAdmission": True}
        return cfg
