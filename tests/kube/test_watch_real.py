"""The executor's Job watch (kubernetes_watch.JobWatch) against a real API server killed with
SIGKILL and started again: its watch cache begins at etcd's current revision, so the watch's
old resourceVersion is refused with 410 Gone and the watch lists again, missing nothing."""

from __future__ import annotations

from typing import Any

import pytest

from headrace.trainers.executors.kubernetes_watch import JobWatch
from tests.kube.conftest import Api
from tools.kube_cluster import KubeCluster

pytestmark = pytest.mark.slow

LABELS = {"app.kubernetes.io/name": "headrace", "app.kubernetes.io/component": "trainer"}


def suspended_job(name: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": LABELS},
            "spec": {"suspend": True, "template": {"spec": {
                "restartPolicy": "Never",
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "c", "image": "registry.example/x:1",
                                "securityContext": {"allowPrivilegeEscalation": False,
                                                    "capabilities": {"drop": ["ALL"]}}}]}}}}


def test_a_watch_older_than_a_restarted_servers_cache_lists_again(
        kube: KubeCluster, api: Api, api_client: Any, namespace: str) -> None:
    from kubernetes import client

    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    api.create(jobs, suspended_job("train-a"))
    w = JobWatch(client.BatchV1Api(api_client), namespace, request_timeout_s=10)
    w.follow(0)
    assert (w.relists, w.known("train-a")) == (1, True)
    old = w.resource_version
    api.create(jobs, suspended_job("train-b"))  # etcd moves past the watch's version

    kube.restart_apiserver()
    api.create(jobs, suspended_job("train-c"))
    w.follow(1)
    w.follow(1)  # the first may end on the 410, the second sees what the list did not
    assert w.relists == 2, "the watch did not list again after 410 Gone"
    assert w.resource_version != old
    assert all(w.known(n) for n in ("train-a", "train-b", "train-c"))
