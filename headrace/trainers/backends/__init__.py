"""Framework backends behind one interface (:mod:`.base`); imported lazily by framework."""

from __future__ import annotations

import importlib

from headrace.core.errors import ValidationFailed
from headrace.streams.contracts import Framework
from headrace.trainers.backends.base import Backend

_MODULES = {Framework.TENSORFLOW: "tensorflow_keras", Framework.MXNET: "mxnet_gluon"}


def get_backend(framework: Framework | str) -> Backend:
    """The backend for ``framework``; its framework is imported only now."""
    try:
        fw = Framework(framework)
    except ValueError:
        raise ValidationFailed(f"unknown framework {framework!r}: use "
                               f"{' or '.join(f.value for f in Framework)}") from None
    module = importlib.import_module(f"headrace.trainers.backends.{_MODULES[fw]}")
    backend: Backend = module.BACKEND
    return backend
