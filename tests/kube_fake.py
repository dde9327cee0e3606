"""A fake Kubernetes API for executor tests (no API server can run on these machines).

One object stands in for ``BatchV1Api``, ``CoreV1Api`` and ``CustomObjectsApi``: it keeps
the objects it is given (as the API server would receive them, camelCase manifests, with a
``uid``), records every request as ``(verb, kind, name)``, deletes
what an object owns when it is deleted (ownerReferences, as the garbage collector does), and
injects faults: ``fail_next[(verb, kind)]`` pops an HTTP status per call, ``fail_with`` fails
every create, ``delay_s`` stalls every call. Job status is ``status`` (shared) unless
``statuses[name]`` is set; pods and their logs are ``pods`` and ``logs``.

``list_namespaced_job`` serves a list (with a ``resourceVersion``) and a watch as the API
server streams it (JSON lines the real ``kubernetes.watch.Watch`` parses): every Job whose
status changed since it was last sent, ``DELETED`` for Jobs gone; :meth:`expire` makes every
older ``resourceVersion`` answer 410 Gone, as an API server's compacted history does.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from types import SimpleNamespace as NS
from typing import Any

from kubernetes.client import V1JobList

from headrace.topology.validation import to_manifest


class ApiError(Exception):
    def __init__(self, status: int | None) -> None:
        super().__init__(f"status {status}")
        self.status = status
        self.reason = f"status {status}"


class FakeKube:
    """Batch, Core, Networking, CustomObjects and Apiextensions APIs over in-memory objects."""

    def __init__(self, *, jobset_crd: bool = False, watch_blocks: bool = False) -> None:
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
        # A watch with nothing to report waits its timeout_seconds, as the API server does
        # (off by default: tests step the executor by hand).
        self.watch_blocks = watch_blocks
        self.lock = threading.RLock()
        self.rv = 1  # the resourceVersion counter
        self.expired_before = 0
        self.sent: dict[str, str] = {}  # Job -> the status JSON the last list/watch carried

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

    def create_namespaced_job(self, ns: str, body: Any, **kw: Any) -> Any:
        return self._create(body)

    def read_namespaced_job(self, name: str, ns: str, **kw: Any) -> Any:
        got = self._get("get", "Job", name)
        return NS(metadata=NS(name=name, uid=got["metadata"]["uid"]))

    def read_namespaced_job_status(self, name: str, ns: str, **kw: Any) -> Any:
        self._get("get", "Job", name)
        return NS(status=self.statuses.get(name, self.status))

    def patch_namespaced_job(self, name: str, ns: str, body: dict[str, Any], **kw: Any) -> Any:
        return self._patch("Job", name, body)

    def delete_namespaced_job(self, name: str, ns: str, **kw: Any) -> None:
        self._delete("Job", name)

    def list_namespaced_job(self, ns: str, label_selector: str | None = None, *,
                            watch: bool = False, resource_version: str | None = None,
                            **kw: Any) -> V1JobList:
        self._request("watch" if watch else "list", "Job", str(resource_version or ""))
        if not watch:
            with self.lock:
                current = self._job_statuses()
                self.sent = current
                self.rv += 1
                items = [NS(metadata=NS(name=n), status=self._status_of(n)) for n in current]
                return NS(items=items, metadata=NS(resource_version=str(self.rv)))
        if int(resource_version or 0) < self.expired_before:
            gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410,
                                                "reason": "Expired",
                                                "message": "too old resource version"}}
            return _Stream([gone])
        events = self._changes()
        if not events and self.watch_blocks:
            time.sleep(float(kw.get("timeout_seconds") or 1))
            events = self._changes()
        return _Stream(events)

    def expire(self) -> None:
        """Every resourceVersion handed out so far is now too old (410 Gone)."""
        with self.lock:
            self.rv += 1
            self.expired_before = self.rv

    def _status_of(self, name: str) -> Any:
        return self.statuses.get(name, self.status)

    def _job_statuses(self) -> dict[str, str]:
        return {n: json.dumps(_plain_status(self._status_of(n)), sort_keys=True)
                for (k, n) in self.objects if k == "Job"}

    def _changes(self) -> list[dict[str, Any]]:
        with self.lock:
            current = self._job_statuses()
            events = []
            for name, st in current.items():
                if self.sent.get(name) != st:
                    self.rv += 1
                    events.append({"type": "ADDED" if name not in self.sent else "MODIFIED",
                                   "object": _job_object(name, st, self.rv)})
            for name in set(self.sent) - set(current):
                self.rv += 1
                events.append({"type": "DELETED",
                               "object": _job_object(name, self.sent[name], self.rv)})
            self.sent = current
            return events

    # -- CoreV1Api ---------------------------------------------------------------------

    def create_namespaced_service(self, ns: str, body: Any, **kw: Any) -> Any:
        return self._create(body)

    def delete_namespaced_service(self, name: str, ns: str, **kw: Any) -> None:
        self._delete("Service", name)

    # -- NetworkingV1Api ---------------------------------------------------------------

    def create_namespaced_network_policy(self, ns: str, body: Any, **kw: Any) -> Any:
        return self._create(body)

    def list_namespaced_pod(self, ns: str, label_selector: str, **kw: Any) -> Any:
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

    def list_namespaced_custom_object(self, **kw: Any) -> Any:
        kind = _KINDS[kw["plural"]]
        self._request("list", kind, "")
        if kind == "JobSet" and not self.jobset_crd:
            raise ApiError(404)  # the CRD is not installed
        return {"items": [m for (k, _), m in self.objects.items() if k == kind]}


_KINDS = {"podgroups": "PodGroup", "jobsets": "JobSet"}


def _plain_status(st: Any) -> dict[str, Any]:
    conds = [{"type": c.type, "status": c.status, "reason": getattr(c, "reason", None),
              "message": getattr(c, "message", None)} for c in (st.conditions or [])]
    return {"active": int(st.active or 0), "failed": int(st.failed or 0),
            "succeeded": int(getattr(st, "succeeded", 0) or 0), "conditions": conds}


def _job_object(name: str, status_json: str, rv: int) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "resourceVersion": str(rv)},
            "status": json.loads(status_json)}


class _Stream:
    """A watch response: JSON lines, as ``kubernetes.watch`` reads them."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self._data = b"".join(json.dumps(e).encode() + b"\n" for e in events)

    def stream(self, amt: Any = None, decode_content: bool = False) -> Any:
        yield self._data

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


def pod(name: str, phase: str = "Running", exit_code: int | None = None,
        disrupted: bool = False, node: str | None = None) -> Any:
    """A pod as the client returns it: its node, phase, trainer exit code and conditions."""
    term = NS(exit_code=exit_code, finished_at="2024-01-01T00:00:00Z") if exit_code else None
    cs = NS(name="trainer", state=NS(terminated=term))
    conds = [NS(type="DisruptionTarget", status="True")] if disrupted else []
    return NS(metadata=NS(name=name), spec=NS(node_name=node),
              status=NS(phase=phase, container_statuses=[cs], conditions=conds))
