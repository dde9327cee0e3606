"""The Kubernetes API client for ``topology apply``, with one line for each way its configuration
can be wrong (the kubernetes package would print a traceback or blame the wrong thing).

Like kubectl: a kubeconfig (``KUBECONFIG``, else ``~/.kube/config``) when there is one, else the
pod's own service account when running in a pod.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from headrace.core.errors import ConfigError

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def _kubeconfig_paths(environ: dict[str, str]) -> list[Path]:
    value = environ.get("KUBECONFIG", "")
    if value:
        return [Path(p).expanduser() for p in value.split(os.pathsep) if p]
    return [Path(environ.get("HOME", "~")).expanduser() / ".kube" / "config"]


def _from_kubeconfig(paths: list[Path], context: str | None) -> Any:
    import yaml
    from kubernetes import client
    from kubernetes import config as kube_config

    where = os.pathsep.join(str(p) for p in paths)
    for p in paths:
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ConfigError(f"kubeconfig {p} cannot be read: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" at line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"kubeconfig {p} is not valid YAML{at}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"kubeconfig {p} is not a kubeconfig (expected a mapping with "
                              "clusters, users and contexts)")
    configuration = client.Configuration()
    try:
        kube_config.load_kube_config(config_file=where if len(paths) > 1 else str(paths[0]),
                                     context=context, client_configuration=configuration)
    except kube_config.ConfigException as exc:
        raise ConfigError(f"kubeconfig {where}: {_one_line(exc)}") from None
    except Exception as exc:  # a field of the wrong type, a bad base64 certificate, ...
        raise ConfigError(f"kubeconfig {where} is malformed: {type(exc).__name__}: "
                          f"{_one_line(exc)}") from None
    return client.ApiClient(configuration)


def _in_cluster(environ: dict[str, str], sa_dir: Path) -> Any:
    from kubernetes import client
    from kubernetes import config as kube_config

    token, ca = sa_dir / "token", sa_dir / "ca.crt"
    if not token.is_file():
        raise ConfigError(f"running in a pod but its service account token {token} is missing: "
                          "the pod needs automountServiceAccountToken: true (or a projected "
                          "token at that path)")
    if not ca.is_file():
        raise ConfigError(f"running in a pod but the cluster CA {ca} is missing")
    configuration = client.Configuration()
    loader = kube_config.incluster_config.InClusterConfigLoader(
        token_filename=str(token), cert_filename=str(ca), environ=environ)
    try:
        loader.load_and_set(configuration)
    except kube_config.ConfigException as exc:
        raise ConfigError(f"in-cluster Kubernetes configuration: {_one_line(exc)}") from None
    return client.ApiClient(configuration)


def api_client(*, context: str | None = None, environ: dict[str, str] | None = None,
               sa_dir: Path = SA_DIR) -> Any:
    """An ``ApiClient`` or a one-line ``ConfigError`` naming what is wrong."""
    env = dict(os.environ) if environ is None else environ
    paths = _kubeconfig_paths(env)
    if any(p.exists() for p in paths):
        return _from_kubeconfig([p for p in paths if p.exists()], context)
    if env.get("KUBERNETES_SERVICE_HOST"):
        return _in_cluster(env, sa_dir)
    named = " or ".join(str(p) for p in paths)
    raise ConfigError(f"no Kubernetes configuration: no kubeconfig at {named} and not in a pod "
                      "(KUBERNETES_SERVICE_HOST is unset)")


def _one_line(exc: Any) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return " ".join(lines)[:300] if lines else type(exc).__name__
