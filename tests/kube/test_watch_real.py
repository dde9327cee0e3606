"""The executor's Job watch (kubernetes_watch.JobWatch) meeting 410 Gone on a real API server:
killed with SIGKILL and started again, its watch cache begins at etcd's current revision, so
the watch's old resourceVersion is refused; with etcd's history compacted past the watch's
version, etcd refuses it. Either way the watch lists again, missing nothing, and resumes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from headrace.topology import kube_access
from headrace.trainers.executors.kubernetes_watch import JobWatch
from tests import real_kube
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


@pytest.fixture(scope="module")
def etcd_served() -> Iterator[KubeCluster]:
    """etcd and an API server of this module's own that serves Job watches from etcd (no
    watch cache for Jobs): a watch from a version etcd compacted away meets etcd's own
    refusal. With the cache on, the cache's window decides (the restart test above)."""
    cluster = real_kube.own_cluster(apiserver_args=["--watch-cache-sizes=jobs.batch#0"],
                                    controllers=False)
    yield cluster
    cluster.stop()


@pytest.mark.kube  # (its own control plane, not the `kube` fixture's)
def test_a_watch_whose_version_etcd_compacted_lists_again_and_resumes(
        etcd_served: KubeCluster) -> None:
    from kubernetes import client

    api_client = kube_access.api_client(environ={"KUBECONFIG": str(etcd_served.kubeconfig)})
    api = Api(api_client)
    jobs = "/apis/batch/v1/namespaces/default/jobs"
    api.create(jobs, suspended_job("train-a"))
    w = JobWatch(client.BatchV1Api(api_client), "default", request_timeout_s=10)
    w.follow(0)
    api.create(jobs, suspended_job("train-b"))
    assert w.follow(1) == 1 and w.known("train-b")  # followed by the watch, no list
    stale = w.resource_version
    assert stale is not None and w.relists == 1

    # While the watch is away, a Job comes, another goes, and etcd compacts its history.
    api.create(jobs, suspended_job("train-c"))
    # (Background: the default for Jobs, orphan, waits for the garbage collector, not run here)
    api.request("DELETE", f"{jobs}/train-a", query=[("propagationPolicy", "Background")])
    assert etcd_served.compact_etcd() > int(stale)
    assert w.follow(1) == 0  # etcd: "required revision has been compacted" -> 410 -> list
    assert w.relists == 2, "the watch did not list again after the compaction's 410"
    assert (w.known("train-a"), w.known("train-b"), w.known("train-c")) == (False, True, True)
    assert int(w.resource_version or 0) > int(stale)

    # It resumes watching from the list's version: the next Job arrives as an event.
    api.create(jobs, suspended_job("train-d"))
    assert w.follow(1) == 1 and w.known("train-d") and w.relists == 2
