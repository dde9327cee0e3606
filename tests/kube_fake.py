"""A fake Kubernetes API for executor tests (no API server can run on these machines).

One object stands in for ``BatchV1Api``, ``CoreV1Api``, ``CustomObjectsApi`` and
``ApiextensionsV1Api``: it keeps the objects it is given (as the API server would receive them,
camelCase manifests, with a ``uid``), records every request as ``(verb, kind, name)``, deletes
what an object owns when it is deleted (ownerReferences, as the garbage collector does), and
injects faults: ``fail_next[(verb, kind)]`` pops an HTTP status per call, ``fail_with`` fails
every create, ``delay_s`` stalls every call. Job status is ``status`` (shared) unless
``statuses[name]`` is set; pods and their logs are ``pods`` and ``logs``.
"""

from __future__ import annotations

import threading
import time
import uuid
from types import SimpleNamespace as NS
from typing import Any

from headrace.topology.validation import to_manifest


class ApiError(Exception):
    def __init__(self, status: int | None) -> None:
        super().__init__(f"status {status}")
        self.status = status
        self.reason = f"status {status}"


class FakeKube:
    """Batch, Core, CustomObjects and Apiextensions APIs over in-memory objects."""

    def __init__(self, *, jobset_crd: bool = False) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}  # (kind, name) -> manifest
        self.bodies: dict[tuple[str, str], Any] = {}  # what the client was given
        self.created: list[Any] = []
        self.requests: list[tuple[str, str, str]] = []
        self.status = NS(active=0, failed=0, succeeded=0, conditions=[])
        self.statuses: dict[str, Any] = {}
        self.pods: list[Any] = []
        self.logs: dict[str, str] = {}
        self.fail_with: int | None = None
        self.fail_next: dict[tuple[str, str], list[int]] = {}
        self.delay_s = 0.0
        self.jobset_crd = jobset_crd
        self.lock = threading.Lock()

    # -- plumbing ----------------------------------------------------------------------

    def _request(self, verb: str, kind: str, name: str) -> None:
        with self.lock:
            self.requests.append((verb, kind, name))
            queue = self.fail_next.get((verb, kind))
            status = queue.pop(0) if queue else None
        if self.delay_s:
            time.sleep(self.delay_s)
        if status is not None:
            raise ApiError(status)

    def count(self, verb: str | None = None, kind: str | None = None) -> int:
        return sum(1 for v, k, _ in self.requests
                   if (verb is None or v == verb) and (kind is None or k == kind))

    @property
    def jobs(self) -> dict[str, Any]:
        return {n: self.bodies[("Job", n)] for (k, n) in self.objects if k == "Job"}

    def names(self, kind: str) -> list[str]:
        return [n for (k, n) in self.objects if k == kind]

    def _create(self, body: Any) -> Any:
        manifest = to_manifest(body)
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        self._request("create", kind, name)
        if self.fail_with:
            raise ApiError(self.fail_with)
        with self.lock:
            if (kind, name) in self.objects:
                raise ApiError(409)
            manifest = dict(manifest, metadata=dict(manifest["metadata"], uid=str(uuid.uuid4())))
            self.objects[(kind, name)] = manifest
            self.bodies[(kind, name)] = body
            self.created.append(body)
        return body

    def _get(self, verb: str, kind: str, name: str) -> dict[str, Any]:
        self._request(verb, kind, name)
        got = self.objects.get((kind, name))
        if got is None:
            raise ApiError(404)
        return got

    def _delete(self, kind: str, name: str) -> None:
        self._request("delete", kind, name)
        with self.lock:
            gone = self.objects.pop((kind, name), None)
            self.bodies.pop((kind, name), None)
        if gone is None:
            raise ApiError(404)
        self._collect(gone["metadata"]["uid"])

    def _collect(self, uid: str) -> None:
        """The garbage collector: delete every object owned by ``uid`` (recursively)."""
        with self.lock:
            owned = [key for key, m in self.objects.items()
                     if any(r["uid"] == uid for r in m["metadata"].get("ownerReferences", []))]
            gone = [self.objects.pop(key) for key in owned]
            for key in owned:
                self.bodies.pop(key, None)
        for m in gone:
            self._collect(m["metadata"]["uid"])

    def _patch(self, kind: str, name: str, body: dict[str, Any]) -> Any:
        got = self._get("patch", kind, name)
        with self.lock:
            got["spec"].update(body.get("spec", {}))
        return got

    # -- BatchV1Api --------------------------------------------------------------------

    def create_namespaced_job(self, ns: str, body: Any) -> Any:
        return self._create(body)

    def read_namespaced_job(self, name: str, ns: str) -> Any:
        got = self._get("get", "Job", name)
        return NS(metadata=NS(name=name, uid=got["metadata"]["uid"]))

    def read_namespaced_job_status(self, name: str, ns: str) -> Any:
        self._get("get", "Job", name)
        return NS(status=self.statuses.get(name, self.status))

    def patch_namespaced_job(self, name: str, ns: str, body: dict[str, Any]) -> Any:
        return self._patch("Job", name, body)

    def delete_namespaced_job(self, name: str, ns: str, **kw: Any) -> None:
        self._delete("Job", name)

    # -- CoreV1Api ---------------------------------------------------------------------

    def create_namespaced_service(self, ns: str, body: Any) -> Any:
        return self._create(body)

    def delete_namespaced_service(self, name: str, ns: str, **kw: Any) -> None:
        self._delete("Service", name)

    def list_namespaced_pod(self, ns: str, label_selector: str) -> Any:
        self._request("list", "Pod", label_selector)
        return NS(items=self.pods)

    def read_namespaced_pod_log(self, name: str, ns: str, **kw: Any) -> str:
        self._request("log", "Pod", name)
        return self.logs.get(name, "")

    # -- CustomObjectsApi --------------------------------------------------------------

    def create_namespaced_custom_object(self, **kw: Any) -> Any:
        return self._create(kw["body"])

    def get_namespaced_custom_object(self, **kw: Any) -> Any:
        return self._get("get", _KINDS[kw["plural"]], kw["name"])

    def patch_namespaced_custom_object(self, **kw: Any) -> Any:
        return self._patch(_KINDS[kw["plural"]], kw["name"], kw["body"])

    def delete_namespaced_custom_object(self, **kw: Any) -> None:
        self._delete(_KINDS[kw["plural"]], kw["name"])

    # -- ApiextensionsV1Api ------------------------------------------------------------

    def read_custom_resource_definition(self, name: str) -> Any:
        self._request("get", "CustomResourceDefinition", name)
        if not (self.jobset_crd and name == "jobsets.jobset.x-k8s.io"):
            raise ApiError(404)
        return NS(metadata=NS(name=name))


_KINDS = {"podgroups": "PodGroup", "jobsets": "JobSet"}


def pod(name: str, phase: str = "Running", exit_code: int | None = None,
        disrupted: bool = False) -> Any:
    """A pod as the client returns it: its phase, trainer exit code and conditions."""
    term = NS(exit_code=exit_code, finished_at="2024-01-01T00:00:00Z") if exit_code else None
    cs = NS(name="trainer", state=NS(terminated=term))
    conds = [NS(type="DisruptionTarget", status="True")] if disrupted else []
    return NS(metadata=NS(name=name), status=NS(phase=phase, container_statuses=[cs],
                                                conditions=conds))
