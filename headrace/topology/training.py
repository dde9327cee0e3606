"""Training objects for a TrainRequested: the builders live with the executor (trainers may
not import topology); this maps a request onto them and validates what they build."""

from __future__ import annotations

from typing import Any, Literal

from headrace.contracts import TrainRequested
from headrace.core.types import trained_framework
from headrace.topology.cluster import Deploy
from headrace.trainers.executors.kubernetes_objects import (
    TrainingJobSpec,
    pod_group,
    training_job,
    training_objects,
    worker_service,
)

__all__ = [
    "TrainingJobSpec",
    "pod_group",
    "request_objects",
    "spec_for_request",
    "training_job",
    "training_objects",
    "worker_service",
]


def spec_for_request(
    *,
    request: TrainRequested,
    job_id: str,
    deploy: Deploy,
    gang: Literal["none", "volcano", "kueue"] = "volcano",
    gpu_type: str | None = None,
    queue: str | None = None,
) -> TrainingJobSpec:
    r = request.resources
    return TrainingJobSpec(
        job_id=job_id, model_name=request.model_name,
        framework=trained_framework(request.framework),
        image=deploy.image, namespace=deploy.namespace, workers=r.workers, servers=r.servers,
        strategy=request.spec.strategy,
        gpus_per_worker=r.gpus, gpu_type=gpu_type if r.gpus else None,
        cpu=f"{int(r.cpu * 1000)}m", memory=f"{int(r.memory_gib * 1024)}Mi",
        server_cpu=f"{int(r.server_cpu * 1000)}m",
        server_memory=f"{int(r.server_memory_gib * 1024)}Mi", server_gpus=r.server_gpus,
        dfs_claim=deploy.dfs_claim, dfs_root=deploy.dfs_root, kafka_secret=deploy.kafka_secret,
        gang=gang, queue=queue,
    )


def request_objects(
    *, request: TrainRequested, job_id: str, deploy: Deploy,
    gang: Literal["none", "volcano", "kueue"] = "volcano",
) -> list[Any]:
    return training_objects(spec_for_request(request=request, job_id=job_id, deploy=deploy,
                                             gang=gang))
