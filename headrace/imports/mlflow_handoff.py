"""The MLflow resolver of ``headrace models import``: a ``models:/`` or ``runs:/`` URI to the
file importer's source, in the format it reads.

The download and the signature come from ``mlflow_source``; what MLflow 3 writes by default is
then put in the file importer's formats: a scikit-learn model saved with skops is loaded with
the types its producer trusted (the MLmodel lists them; skops refuses any other) and dumped
with joblib; LightGBM's scikit-learn API saved with skops becomes its booster's text model. The
tracking server comes from ``HEADRACE_MLFLOW_TRACKING_URI``, else ``MLFLOW_TRACKING_URI``, read
when the CLI resolves the source (its entrypoint).
"""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from headrace.core.errors import ValidationFailed
from headrace.imports.mlflow_export import MlflowSettings
from headrace.imports.mlflow_model import HEADRACE_FLAVOR, SKOPS
from headrace.imports.mlflow_source import ResolvedSource, resolve


def from_mlflow_uri(uri: str) -> Any:
    """``headrace.imports.sources.ImportSource`` of ``uri`` (the resolver registry's entry
    for ``models`` and ``runs``)."""
    settings = MlflowSettings.from_env(dict(os.environ))
    dest = Path(tempfile.mkdtemp(prefix="headrace-mlflow-"))
    atexit.register(shutil.rmtree, dest, True)  # the import reads it before the process ends
    resolved = resolve(uri, tracking_uri=settings.tracking_uri, dest=dest)
    path, fmt = handed_on(resolved, dest / "handed")
    sources = importlib.import_module("headrace.imports.sources")
    return sources.ImportSource(path=path, uri=uri, format=fmt,
                                lineage={"kind": "mlflow", **resolved.lineage,
                                         "inputs": [i.model_dump(mode="json")
                                                    for i in resolved.inputs],
                                         "labels": list(resolved.labels)})


def handed_on(source: ResolvedSource, into: Path) -> tuple[Path, str]:
    """(the file, its format name) as the file importer reads them."""
    where = source.lineage.get("source", str(source.path))
    if source.format == HEADRACE_FLAVOR:
        raise ValidationFailed(f"{where} is a Headrace version: headrace.imports.mlflow_export."
                               f"import_version publishes it as it is")
    if source.format != SKOPS:
        return source.path, source.format
    model = _load_skops(source, where)
    into.mkdir(parents=True, exist_ok=True)
    if source.lineage.get("mlflow_flavor") == "lightgbm":
        booster = getattr(model, "booster_", None)
        if booster is None:
            raise ValidationFailed(f"{where}: its LightGBM model has no fitted booster")
        booster.save_model(str(into / "model.txt"))
        return into / "model.txt", "lightgbm"
    import joblib

    joblib.dump(model, into / "model.joblib")
    return into / "model.joblib", "sklearn"


def _load_skops(source: ResolvedSource, where: str) -> Any:
    import skops.io  # type: ignore[import-untyped]

    trusted = [str(t) for t in source.details.get("skops_trusted_types") or ()]
    try:
        return skops.io.load(source.path, trusted=trusted)
    except Exception as exc:  # skops: UntrustedTypesFoundException, or a broken file
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValidationFailed(f"{where}: its skops file does not load with the types its "
                               f"MLmodel trusts: {line}") from None
