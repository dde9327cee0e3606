"""A training attempt's objects on the API: created owner first (a gang's suspended until what
it owns exists, then let start, unless Kueue admits it), found by their owner's uid, and deleted
through the owner (the API server's garbage collector deletes the rest). Every call goes through
:class:`~headrace.trainers.executors.kubernetes_api.ApiCalls`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from headrace.trainers.executors.kubernetes_api import ApiCalls
from headrace.trainers.executors.kubernetes_objects import (
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    VOLCANO_GROUP,
    VOLCANO_VERSION,
    TrainingJobSpec,
    training_objects,
)

# The custom resources an attempt may own: kind -> (group, version, plural).
CUSTOM = {"PodGroup": (VOLCANO_GROUP, VOLCANO_VERSION, "podgroups"),
           "JobSet": (JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL)}


@dataclass(frozen=True)
class AttemptObjects:
    """The API objects (``BatchV1Api``, ``CoreV1Api``, ``CustomObjectsApi``,
    ``NetworkingV1Api`` or fakes) an attempt's objects are made with."""

    api: ApiCalls
    batch: Any
    core: Any
    custom: Any
    net: Any
    timeout_s: float

    def create(self, spec: TrainingJobSpec) -> bool:
        """The owner first (a gang's suspended), then what it owns, then let it start: the
        Service and PodGroup exist before any pod, and deleting the owner deletes them."""
        ns = spec.namespace
        owner, *_ = training_objects(spec)
        created = self.api.create(lambda: self._create_object(ns, owner))
        if spec.pods == 1:
            return created
        uid = self.owner_uid(spec)
        for obj in training_objects(spec, owner_uid=uid)[1:]:
            self.api.create(functools.partial(self._create_object, ns, obj))
        if spec.gang != "kueue":  # under Kueue, admission unsuspends it
            self.api.call(lambda: self._patch_owner(spec, {"spec": {"suspend": False}}))
        return created

    def _create_object(self, ns: str, obj: Any) -> Any:
        kind = obj["kind"] if isinstance(obj, dict) else obj.kind
        if kind == "Job":
            return self.batch.create_namespaced_job(ns, obj, _request_timeout=self.timeout_s)
        if kind == "Service":
            return self.core.create_namespaced_service(ns, obj, _request_timeout=self.timeout_s)
        if kind == "NetworkPolicy":
            return self.net.create_namespaced_network_policy(ns, obj,
                                                              _request_timeout=self.timeout_s)
        group, version, plural = CUSTOM[kind]
        return self.custom.create_namespaced_custom_object(
            group=group, version=version, namespace=ns, plural=plural, body=obj,
            _request_timeout=self.timeout_s)

    def owner_uid(self, spec: TrainingJobSpec, *, missing_ok: bool = False) -> str | None:
        if spec.uses_jobset:
            got = self.api.call(lambda: self.custom.get_namespaced_custom_object(
                group=JOBSET_GROUP, version=JOBSET_VERSION, namespace=spec.namespace,
                plural=JOBSET_PLURAL, name=spec.job_name, _request_timeout=self.timeout_s),
                missing_ok=missing_ok)
            return None if got is None else str(got["metadata"]["uid"])
        job = self.api.call(lambda: self.batch.read_namespaced_job(
            spec.role_job_names[0], spec.namespace, _request_timeout=self.timeout_s),
            missing_ok=missing_ok)
        return None if job is None else str(job.metadata.uid)

    def _patch_owner(self, spec: TrainingJobSpec, body: dict[str, Any]) -> Any:
        if spec.uses_jobset:
            return self.custom.patch_namespaced_custom_object(
                group=JOBSET_GROUP, version=JOBSET_VERSION, namespace=spec.namespace,
                plural=JOBSET_PLURAL, name=spec.job_name, body=body,
                _request_timeout=self.timeout_s)
        return self.batch.patch_namespaced_job(spec.role_job_names[0], spec.namespace, body,
                                                _request_timeout=self.timeout_s)

    def delete(self, spec: TrainingJobSpec, propagation: str) -> None:
        """Delete the attempt's owner; the API server's garbage collector deletes the rest."""
        if spec.uses_jobset:
            self.api.call(lambda: self.custom.delete_namespaced_custom_object(
                group=JOBSET_GROUP, version=JOBSET_VERSION, namespace=spec.namespace,
                plural=JOBSET_PLURAL, name=spec.job_name, propagation_policy=propagation,
                _request_timeout=self.timeout_s), missing_ok=True)
            return
        self.api.call(lambda: self.batch.delete_namespaced_job(
            spec.role_job_names[0], spec.namespace, propagation_policy=propagation,
            _request_timeout=self.timeout_s), missing_ok=True)
