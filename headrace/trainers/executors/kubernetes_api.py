"""Reaching the Kubernetes API: the API objects from the in-cluster config or a kubeconfig, the
question whether JobSet is served, and every call of the executor made through
:class:`ApiCalls` (5xx, 429 and no answer retried with backoff; 409 is "already created"; 401
and 403 a configuration error naming the ServiceAccount; other refusals fatal).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from headrace.core.errors import ConfigError, FatalError, RetriableError
from headrace.trainers.executors.kubernetes_objects import (
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
)

log = logging.getLogger("headrace.trainers.executors.kubernetes")  # the executor's, as before

NO_KUBE_CONFIG = ("no Kubernetes configuration: not running in a pod (KUBERNETES_SERVICE_HOST "
                  "is unset) and no kubeconfig (KUBECONFIG or ~/.kube/config)")


@dataclass(frozen=True)
class ApiCalls:
    """How the executor calls the API: ``tries`` attempts, backing off from ``backoff_s`` (at
    most 30 s) and waking early when ``stop`` is set."""

    tries: int
    backoff_s: float
    stop: threading.Event

    def create(self, fn: Callable[[], Any]) -> bool:
        """Send a create; False when it answers 409 (already there)."""
        try:
            self.call(fn)
        except Conflict:
            return False
        return True

    def call(self, fn: Callable[[], Any], *, missing_ok: bool = False) -> Any:
        """One API call, retried with backoff while the API answers 5xx, 429 or nothing."""
        for attempt in range(self.tries):
            try:
                return self._once(fn, missing_ok=missing_ok)
            except RetriableError:
                if attempt + 1 == self.tries:
                    raise
                self.stop.wait(min(30.0, self.backoff_s * 2**attempt))
        raise AssertionError("unreachable")

    def _once(self, fn: Callable[[], Any], *, missing_ok: bool) -> Any:
        try:
            return fn()
        except Exception as exc:
            status = getattr(exc, "status", None)
            if status == 404 and missing_ok:
                return None
            if status == 409:
                raise Conflict() from None
            if status in (401, 403):
                raise ConfigError(f"kubernetes API refused the executor ({status}): check its "
                                  "ServiceAccount and Role") from None
            if status is None or status == 429 or int(status) >= 500:
                raise RetriableError(f"kubernetes API unavailable: {one_line(exc)}") from None
            raise FatalError(f"kubernetes API error {status}: {one_line(exc)}") from None


def networking(core_api: Any) -> Any:
    from kubernetes import client

    return client.NetworkingV1Api(core_api.api_client)


class Conflict(Exception):
    """The API answered 409: the object exists already."""


def one_line(exc: BaseException) -> str:
    text = str(getattr(exc, "reason", None) or exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@dataclass(frozen=True)
class KubeApis:
    """The three API objects the executor uses (real ones from :func:`kube_apis`)."""

    batch: Any
    core: Any
    custom: Any
    namespace: str = "headrace"  # where the JobSet question is asked
    networking: Any = None  # NetworkingV1Api (None: on the core API's client)


def load_kube_config(*, context: str | None = None) -> None:
    """Load the in-cluster config when running in a pod, else the kubeconfig (``context``);
    ``ConfigError`` (one line naming what is missing) if there is neither -- never a silent
    fallback to local training."""
    try:
        from kubernetes import config as kube_config
    except ImportError:
        raise ConfigError("the Kubernetes executor needs the kubernetes package "
                          "(pip install 'headrace[kubernetes]')") from None
    try:
        kube_config.load_incluster_config()
    except kube_config.ConfigException:
        try:
            kube_config.load_kube_config(context=context)
        except (kube_config.ConfigException, OSError, TypeError) as exc:
            detail = one_line(exc)
            if "no configuration found" in detail.lower() or isinstance(exc, FileNotFoundError):
                raise ConfigError(NO_KUBE_CONFIG) from None
            raise ConfigError(f"kubeconfig unusable: {detail}") from None


def kube_apis(*, context: str | None = None) -> KubeApis:
    """The API objects on the loaded configuration (see :func:`load_kube_config`)."""
    load_kube_config(context=context)
    from kubernetes import client

    return KubeApis(batch=client.BatchV1Api(), core=client.CoreV1Api(),
                    custom=client.CustomObjectsApi(), networking=client.NetworkingV1Api())


def jobset_installed(apis: Any) -> bool:
    """Whether the cluster serves JobSet (gangs are then one JobSet each): listing JobSets
    in the namespace answers 404 where its CRD is not installed (a namespaced question, so
    the control plane's Role is enough). Asked once when the executor is built."""
    try:
        apis.custom.list_namespaced_custom_object(
            group=JOBSET_GROUP, version=JOBSET_VERSION, namespace=apis.namespace,
            plural=JOBSET_PLURAL, limit=1, _request_timeout=10)
    except Exception as exc:
        status = getattr(exc, "status", None)
        if status in (401, 403, 404):
            if status != 404:
                log.warning("JobSet: not allowed to list jobsets (%s): gangs are Jobs", status)
            return False
        raise RetriableError(f"kubernetes API unavailable: {one_line(exc)}") from None
    return True
