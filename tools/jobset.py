"""JobSet (sigs.k8s.io/jobset) beside a :class:`KubeCluster` (see
tools/webhook_controller.py): a gang of several roles as one object, which Kueue admits whole.
Its internal certificate management is off (it would name only its Service); the CA made here
is put into its webhook configurations."""

from __future__ import annotations

from typing import Any

from tools.webhook_controller import WebhookController


class JobSet(WebhookController):
    name = "jobset"
    namespace = "jobset-system"
    service = "jobset-webhook-service"
    kept_paths = ("-jobset-x-k8s-io-", "--v1-pod")
    probe_path = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
    probe_body = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                  "metadata": {"name": "readiness-probe"},
                  "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {
                      "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                          {"name": "c", "image": "probe"}]}}}}}]}}

    def webhooks(self) -> list[dict[str, Any]]:
        # Its kustomization's patch: the pod webhooks see JobSet's pods only.
        docs = super().webhooks()
        for doc in docs:
            for hook in doc["webhooks"]:
                if hook["rules"][0]["resources"] == ["pods"]:
                    hook["objectSelector"] = {"matchExpressions": [
                        {"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}
        return docs

    def config(self) -> dict[str, Any]:
        return {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": self.webhook_port, "host": "127.0.0.1",
                        "certDir": str(self.cert_dir)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
        }
