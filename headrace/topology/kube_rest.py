"""Apply (server-side), create, patch, get, list and delete the kinds ``topology apply`` owns,
through the kubernetes client's transport (its auth, TLS and proxy settings) with one code path
for every kind.

The typed APIs need one method name per kind and deserialise into models that reject partial
objects; apply only needs JSON in and out, so it sends plain REST requests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from headrace.core.errors import ConfigError, RetriableError

# (group, kind) -> (version, plural) for every kind the chart's applied templates render.
KINDS: dict[tuple[str, str], tuple[str, str]] = {
    ("", "ServiceAccount"): ("v1", "serviceaccounts"),
    ("", "Service"): ("v1", "services"),
    ("", "ConfigMap"): ("v1", "configmaps"),
    ("apps", "StatefulSet"): ("v1", "statefulsets"),
    ("apps", "Deployment"): ("v1", "deployments"),
    ("policy", "PodDisruptionBudget"): ("v1", "poddisruptionbudgets"),
    ("rbac.authorization.k8s.io", "Role"): ("v1", "roles"),
    ("rbac.authorization.k8s.io", "RoleBinding"): ("v1", "rolebindings"),
    ("keda.sh", "ScaledObject"): ("v1alpha1", "scaledobjects"),
    ("keda.sh", "TriggerAuthentication"): ("v1alpha1", "triggerauthentications"),
    ("monitoring.coreos.com", "ServiceMonitor"): ("v1", "servicemonitors"),
}
# A whole object is a strategic merge for built-in kinds, a JSON merge patch for custom ones
# (the API server answers 415 to a whole object sent as a JSON Patch).
_STRATEGIC = "application/strategic-merge-patch+json"
_MERGE = "application/merge-patch+json"
_CUSTOM_GROUPS = {"keda.sh", "monitoring.coreos.com"}
# Server-side apply: the server merges by its schema and owns the diff (fields this manager
# applied before and no longer sends are removed); JSON is YAML.
_APPLY = "application/apply-patch+yaml"
_JSON_PATCH = "application/json-patch+json"
FIELD_MANAGER = "headrace"
# Who owns what the client-side path writes (before it named itself: the client's user agent).
CLIENT_SIDE_MANAGERS = ("headrace-client-side", "OpenAPI-Generator")


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


@dataclass(frozen=True)
class Ref:
    """A namespaced object: ``group``/``kind`` name it, ``version`` comes from :data:`KINDS`."""

    group: str
    kind: str
    namespace: str
    name: str = ""

    @classmethod
    def of(cls, manifest: dict[str, Any]) -> Ref:
        meta = manifest["metadata"]
        return cls(group_of(manifest["apiVersion"]), manifest["kind"], meta["namespace"],
                   meta["name"])

    @property
    def group_kind(self) -> str:
        """KEP-3659's spelling: ``Kind.group``, or ``Kind`` for the core group."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"

    def path(self, *, collection: bool = False) -> str:
        try:
            version, plural = KINDS[(self.group, self.kind)]
        except KeyError:
            raise ConfigError(f"topology apply does not manage {self.group_kind}") from None
        root = f"/apis/{self.group}/{version}" if self.group else f"/api/{version}"
        base = f"{root}/namespaces/{self.namespace}/{plural}"
        return base if collection else f"{base}/{self.name}"


def parse_group_kind(text: str, namespace: str) -> Ref:
    kind, _, group = text.partition(".")
    return Ref(group, kind, namespace)


class Rest:
    """JSON requests on a ``kubernetes.client.ApiClient``; errors become one-line
    ``HeadraceError``s naming the object and the server."""

    def __init__(self, api_client: Any) -> None:
        self.api = api_client

    def _call(self, method: str, path: str, *, body: Any = None,
              query: list[tuple[str, str]] | None = None, content_type: str | None = None,
              what: str) -> tuple[int, Any]:
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            req = self.api.param_serialize(method=method, resource_path=path,
                                           query_params=query or [], header_params=headers,
                                           body=body, auth_settings=["BearerToken"])
            resp = self.api.call_api(*req)
            resp.read()
        except ApiException as exc:  # raised by the REST layer (e.g. status 0: no connection)
            raise self._error(what, exc.status, exc.reason) from None
        except Exception as exc:  # urllib3/socket: the server is not there
            raise RetriableError(f"Kubernetes API server {self.host} unreachable ({what}): "
                                 f"{_one_line(exc)}") from None
        data = json.loads(resp.data) if resp.data else {}
        return resp.status, data

    @property
    def host(self) -> str:
        return str(getattr(self.api.configuration, "host", "?"))

    def _error(self, what: str, status: int | None, reason: Any) -> Exception:
        if not status:
            return RetriableError(f"Kubernetes API server {self.host} unreachable ({what}): "
                                  f"{_one_line(reason)}")
        return ConfigError(f"Kubernetes API refused {what} ({status}): {_one_line(reason)}")

    def _ok(self, what: str, status: int, data: Any, *also: int) -> Any:
        if 200 <= status < 300 or status in also:
            return data
        raise self._error(what, status, (data or {}).get("message") or status)

    def get(self, ref: Ref) -> dict[str, Any] | None:
        status, data = self._call("GET", ref.path(), what=f"reading {ref}")
        return None if status == 404 else self._ok(f"reading {ref}", status, data)

    def create(self, manifest: dict[str, Any]) -> bool:
        """Create it; ``False`` if it already exists."""
        ref = Ref.of(manifest)
        status, data = self._call("POST", ref.path(collection=True), body=manifest,
                                  query=[("fieldManager", CLIENT_SIDE_MANAGERS[0])],
                                  content_type="application/json", what=f"creating {ref}")
        if status == 409:
            return False
        self._ok(f"creating {ref}", status, data)
        return True

    def patch(self, manifest: dict[str, Any]) -> None:
        ref = Ref.of(manifest)
        ctype = _MERGE if ref.group in _CUSTOM_GROUPS else _STRATEGIC
        status, data = self._call("PATCH", ref.path(), body=manifest, content_type=ctype,
                                  query=[("fieldManager", CLIENT_SIDE_MANAGERS[0])],
                                  what=f"patching {ref}")
        self._ok(f"patching {ref}", status, data)

    def json_patch(self, ref: Ref, ops: list[dict[str, Any]]) -> None:
        """A JSON Patch (RFC 6902); a failed ``test`` op is a 422 -> ConfigError."""
        status, data = self._call("PATCH", ref.path(), body=ops, content_type=_JSON_PATCH,
                                  what=f"patching {ref}")
        self._ok(f"patching {ref}", status, data)

    def apply(self, manifest: dict[str, Any], *, force: bool = False, dry_run: bool = False,
              field_manager: str = FIELD_MANAGER) -> tuple[bool, dict[str, Any]]:
        """Server-side apply as ``field_manager``: (created, the object the server holds). A
        field another manager set to another value is a conflict, refused unless ``force``
        (the field is then taken over). ``dry_run``: the server's answer, nothing written."""
        ref = Ref.of(manifest)
        query = [("fieldManager", field_manager)] + ([("force", "true")] if force else []) \
            + ([("dryRun", "All")] if dry_run else [])
        status, data = self._call("PATCH", ref.path(), body=json.dumps(manifest), query=query,
                                  content_type=_APPLY, what=f"applying {ref}")
        if status == 409:
            raise ConfigError(
                f"applying {ref}: {_conflicts(data)} "
                "(another field manager set these fields; --force-conflicts takes them over)")
        return status == 201, dict(self._ok(f"applying {ref}", status, data))

    def names(self, ref: Ref, *, label_selector: str) -> list[str]:
        """Names of the objects of ``ref``'s kind and namespace carrying the labels."""
        status, data = self._call("GET", ref.path(collection=True),
                                  query=[("labelSelector", label_selector)],
                                  what=f"listing {ref.group_kind}")
        if status == 404:  # a custom kind whose CRD is not installed holds nothing
            return []
        items = self._ok(f"listing {ref.group_kind}", status, data).get("items") or []
        return sorted(i["metadata"]["name"] for i in items)

    def delete(self, ref: Ref) -> None:
        status, data = self._call("DELETE", ref.path(),
                                  query=[("propagationPolicy", "Background")],
                                  what=f"deleting {ref}")
        self._ok(f"deleting {ref}", status, data, 404)


def _one_line(exc: Any) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


def _conflicts(status: Any) -> str:
    """The server's conflict Status on one line: each field with its manager."""
    causes = ((status or {}).get("details") or {}).get("causes") or []
    if not causes:
        return _one_line((status or {}).get("message") or "conflict")
    return "conflicts: " + "; ".join(f"{c.get('field', '?')} ({c.get('message', '')})"
                                     for c in causes)
