"""A loaded, verified, warmed model version, and the holder the worker reads it from."""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from headrace.core.errors import PermanentError, RetriableError
from headrace.scorers.adapters import ModelFn, adapter_for, buckets
from headrace.store.manifest import Manifest
from headrace.store.versions import resolve

log = logging.getLogger(__name__)

WARM_UP_LIMIT = 8192  # warm every bucket up to this many rows


@dataclass(frozen=True)
class LoadedModel:
    name: str
    version: int
    manifest: Manifest
    manifest_sha256: str
    fn: ModelFn
    features: tuple[str, ...]
    classes: tuple[str, ...]
    label_json: tuple[str, ...] = field(default=())  # JSON-encoded class names, output order

    @property
    def num_outputs(self) -> int:
        return len(self.classes) if self.classes else 1

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.version}"


def load_model(*, root: Path, name: str, alias: str, device: str, max_batch: int) -> LoadedModel:
    """Resolve ``name@alias`` (every file's sha256 verified), load it, and warm it.

    Raises ``IntegrityError``/``VersionNotFound`` (refuse: keep serving the current model) or
    ``RetriableError`` (DFS trouble: try again later).
    """
    try:
        mv = resolve(root, f"{name}@{alias}")
    except OSError as exc:
        raise RetriableError(f"reading {name}@{alias} from the DFS failed: {exc}") from exc
    m = mv.manifest
    if m.input_dtype != "float32":
        raise PermanentError(f"{mv.name}:{mv.version}: input dtype {m.input_dtype} unsupported")
    try:
        fn = adapter_for(m.framework).load(version_path=mv.path, manifest=m, device=device,
                                           max_batch=max_batch)
    except OSError as exc:
        raise RetriableError(f"loading {mv.name}:{mv.version} failed: {exc}") from exc
    except (ValueError, RuntimeError, KeyError) as exc:  # framework refuses the files
        raise PermanentError(f"{mv.name}:{mv.version} does not load: {exc}") from exc
    model = LoadedModel(
        name=mv.name, version=mv.version, manifest=m, manifest_sha256=mv.manifest_sha256,
        fn=fn, features=tuple(m.features), classes=tuple(m.classes),
        label_json=tuple(json.dumps(c) for c in m.classes),
    )
    warm(model, max_batch=max_batch)
    return model


def warm(model: LoadedModel, *, max_batch: int) -> None:
    """Run every bucket once so the first real batch pays no tracing or allocation."""
    t0 = time.perf_counter()
    width = len(model.features)
    for size in buckets(min(max_batch, WARM_UP_LIMIT)):
        y = model.fn(np.zeros((size, width), np.float32))
        if y.shape != (size, model.num_outputs):
            raise PermanentError(
                f"{model.ref}: output shape {y.shape[1:]} does not match the manifest's "
                f"{model.num_outputs} output(s)")
    log.info("model %s warmed in %.2fs", model.ref, time.perf_counter() - t0)


class ModelHolder:
    """The model the next batch uses. The worker reads ``current`` once per batch, so a swap
    made by the watcher thread takes effect between batches, never inside one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: LoadedModel | None = None
        self.loaded = threading.Event()

    @property
    def current(self) -> LoadedModel | None:
        return self._current

    def swap(self, model: LoadedModel) -> LoadedModel | None:
        with self._lock:
            old, self._current = self._current, model
        self.loaded.set()
        return old
