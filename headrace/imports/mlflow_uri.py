"""MLflow model URIs: ``models:/NAME/VERSION``, ``models:/NAME@ALIAS``, ``runs:/RUN_ID/PATH``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from headrace.core.errors import ValidationFailed

SCHEMES = ("models:/", "runs:/")
_MODEL_VERSION = re.compile(r"^models:/(?P<name>[^/@]+)/(?P<version>[0-9]+)$")
_MODEL_ALIAS = re.compile(r"^models:/(?P<name>[^/@]+)@(?P<alias>[A-Za-z0-9_-]+)$")
_RUN = re.compile(r"^runs:/(?P<run>[0-9a-f]{8,64})/(?P<path>[^?#]+?)/?$")


@dataclass(frozen=True)
class MlflowUri:
    uri: str
    name: str = ""  # registered model
    version: str = ""  # its version, or
    alias: str = ""  # an alias of one
    run_id: str = ""  # a run's artifacts
    path: str = ""  # under the run


def is_mlflow_uri(source: str) -> bool:
    return source.startswith(SCHEMES)


def parse(source: str) -> MlflowUri:
    """The URI's parts; ValidationFailed (one line) for anything else."""
    if m := _MODEL_VERSION.match(source):
        return MlflowUri(source, name=m["name"], version=m["version"])
    if m := _MODEL_ALIAS.match(source):
        return MlflowUri(source, name=m["name"], alias=m["alias"])
    if m := _RUN.match(source):
        return MlflowUri(source, run_id=m["run"], path=m["path"].strip("/"))
    raise ValidationFailed(f"{source!r} is not an MLflow model URI: use models:/NAME/VERSION, "
                           f"models:/NAME@ALIAS or runs:/RUN_ID/PATH")
