"""Validate Kubernetes objects offline: core kinds against the official OpenAPI schemas
(kubernetes-validate, strict: unknown fields fail), custom resources against ``crd_schemas``,
and every pod template against Pod Security "restricted" (``pod_security``).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache, lru_cache
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate
from kubernetes.client import ApiClient

from headrace.core.errors import ValidationFailed
from headrace.topology.crd_schemas import CRD_SCHEMAS
from headrace.topology.pod_security import manifest_violations

KUBERNETES_VERSION = "1.30.0"


@lru_cache(maxsize=1)
def _api_client() -> ApiClient:
    return ApiClient()


def to_manifest(obj: Any) -> dict[str, Any]:
    """A plain camelCase mapping, as the API server would receive it."""
    if isinstance(obj, dict):
        return obj
    data = _api_client().sanitize_for_serialization(obj)
    if not isinstance(data, dict):
        raise TypeError(f"not a Kubernetes object: {type(obj).__name__}")
    return data


@cache
def _crd_validator(api_version: str, kind: str) -> Any:
    schema = CRD_SCHEMAS.get((api_version, kind))
    return None if schema is None else jsonschema.Draft202012Validator(schema)


def validate_object(obj: Any, *, version: str = KUBERNETES_VERSION,
                    pod_security: bool = True) -> dict[str, Any]:
    """Return the manifest of ``obj`` or raise ``ValidationFailed`` naming the bad field (or,
    with ``pod_security``, the first way its pods fail the restricted profile)."""
    data = to_manifest(obj)
    kind, api = data.get("kind", "?"), data.get("apiVersion", "?")
    where = f"{kind}/{(data.get('metadata') or {}).get('name', '?')}"
    crd = _crd_validator(api, kind)
    try:
        if crd is not None:
            crd.validate(data)
            for job in _embedded_jobs(data):
                kubernetes_validate.validate(job, version, strict=True)
        else:
            kubernetes_validate.validate(data, version, strict=True)
    except jsonschema.ValidationError as exc:
        path = ".".join(str(p) for p in exc.absolute_path) or "(root)"
        raise ValidationFailed(f"{where}: {path}: {exc.message}", details=data) from None
    except kubernetes_validate.SchemaNotFoundError:
        raise ValidationFailed(f"{where}: no schema for {api} {kind}", details=data) from None
    embedded = [data, *_embedded_jobs(data)]
    problems = [p for m in embedded for p in manifest_violations(m)] if pod_security else []
    if problems:
        raise ValidationFailed(f"pod security (restricted): {problems[0]}", details=data)
    return data


def _embedded_jobs(data: dict[str, Any]) -> list[dict[str, Any]]:
    """A JobSet's ReplicatedJob templates, as the ``batch/v1`` Jobs its controller creates."""
    if data.get("kind") != "JobSet":
        return []
    name = data["metadata"]["name"]
    return [{"apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"name": f"{name}-{rj['name']}-0", **rj["template"].get("metadata", {})},
             "spec": rj["template"]["spec"]} for rj in data["spec"]["replicatedJobs"]]


def validate_all(objs: Iterable[Any], *, version: str = KUBERNETES_VERSION) -> list[dict[str, Any]]:
    return [validate_object(o, version=version) for o in objs]
