"""Where each framework's builders of the built-in families live: the family table
(contracts/families.py) says which families a framework builds, this registry which module
builds them, one loader per framework. A loader imports its framework when called, never on
import, so the list costs nothing to a process that builds no model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from headrace.contracts import Framework
from headrace.core.llvm_guard import before_torch


def _keras() -> Mapping[str, object]:
    from headrace.trainers.backends import keras_families

    return keras_families.FAMILIES


def _gluon() -> Mapping[str, object]:
    from headrace.trainers.backends import gluon_families

    return gluon_families.FAMILIES


def _torch() -> Mapping[str, object]:
    before_torch()  # torch after TensorFlow in one process (core.llvm_guard)
    from headrace.trainers.backends import torch_families

    return torch_families.FAMILIES


LOADERS: Mapping[Framework, Callable[[], Mapping[str, object]]] = MappingProxyType({
    Framework.TENSORFLOW: _keras,
    Framework.MXNET: _gluon,
    Framework.TORCH: _torch,
})


def family_builders(framework: Framework | str) -> Mapping[str, object]:
    """Family name -> builder for ``framework`` (its framework imported now)."""
    return LOADERS[Framework(framework)]()
