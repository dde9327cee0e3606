"""Render ``helm/headrace`` in-process with Helm's own engine (helm-python-sdk) and keep the
objects ``headrace topology apply`` owns.

The chart is the one source of the scorer objects: ``apply`` and ``plan --manifests`` render it
with the values ``plan --values-out`` writes, as release ``headrace`` (so the names match the
cluster file's defaults: ServiceAccounts ``headrace-scorer``/``-control``/``-trainer``, claim
``headrace-dfs``, Secret ``headrace-kafka``). The chart ships inside the package
(``headrace/_chart``, a link to ``helm/headrace`` in a checkout, its files in a wheel), or is
given with ``--chart`` / ``HEADRACE_CHART``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from headrace.core.errors import ConfigError

RELEASE = "headrace"
# What apply owns, in creation order (ServiceAccounts before the pods that use them, a
# Deployment before the ScaledObject that scales it): the executor's RBAC, the scorer groups
# (ServiceAccount, Services, StatefulSets or Deployments, PDBs), KEDA, the ServiceMonitor.
# The control plane, Secret, PVC, NetworkPolicies and CronJobs are left to `helm install`.
APPLIED_TEMPLATES = ("rbac.yaml", "scorers.yaml", "keda.yaml", "servicemonitor.yaml")


def source_chart() -> Path:
    """The chart the package ships: ``headrace/_chart`` (in a checkout, ``helm/headrace``)."""
    return Path(__file__).resolve().parents[1] / "_chart"


def find_chart(path: Path | None = None) -> Path:
    chart = path or source_chart()
    if not (chart / "Chart.yaml").is_file():
        raise ConfigError(f"Helm chart not found at {chart}: pass --chart DIR or set "
                          "HEADRACE_CHART")
    return chart


def render_chart(values: dict[str, Any], *, namespace: str, chart: Path | None = None,
                 release: str = RELEASE) -> dict[str, list[dict[str, Any]]]:
    """Each template's file name -> its rendered objects (values checked by the chart's schema)."""
    where = find_chart(chart)
    try:
        import helm_python as helm
    except ImportError:
        raise ConfigError("rendering the Helm chart needs helm-python-sdk: "
                          "pip install 'headrace[topology]'") from None
    try:
        with helm.Chart.load(where) as c:
            docs = c.render(values, name=release, namespace=namespace)
    except helm.HelmError as exc:
        lines = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise ConfigError(f"chart {where}: {lines[:400]}") from None
    return {path.rsplit("/", 1)[-1]: [d for d in yaml.safe_load_all(text) if d]
            for path, text in docs.items() if path.endswith(".yaml")}


def applied_objects(values: dict[str, Any], *, namespace: str,
                    chart: Path | None = None) -> list[dict[str, Any]]:
    """The objects of :data:`APPLIED_TEMPLATES`, namespaced as ``helm install -n`` would."""
    rendered = render_chart(values, namespace=namespace, chart=chart)
    out = []
    for template in APPLIED_TEMPLATES:
        for doc in rendered.get(template, []):
            doc.setdefault("metadata", {})["namespace"] = namespace
            out.append(doc)
    return out
