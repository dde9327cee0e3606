"""A loaded, verified, warmed model version, and the holder the worker reads it from."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from headrace.codecs import check_signature, codec
from headrace.core.errors import PermanentError, RetriableError
from headrace.scorers.adapters import InputsFn, ModelFn, adapter_for, buckets, precision, runtime
from headrace.scorers.engine import sizing
from headrace.scorers.wire.inputs import Signature, signature_bytes
from headrace.store.manifest import Manifest
from headrace.store.signature import ModelOutput
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
    # Models with a signature beyond one numeric input: ``inputs_fn`` scores decoded inputs.
    signature: Signature = ()
    outputs: tuple[ModelOutput, ...] = ()
    inputs_fn: InputsFn | None = None
    batch_rows: int = 0  # rows per micro-batch (fewer than batch_size for big inputs)

    @property
    def tabular(self) -> bool:
        """One numeric input and one output: the fast path (``fn`` on a float32 matrix)."""
        return self.inputs_fn is None

    @property
    def num_outputs(self) -> int:
        return len(self.classes) if self.classes else 1

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.version}"


@dataclass(frozen=True)
class Sizing:
    max_batch_bytes: int = sizing.DEFAULT_MAX_BATCH_BYTES
    device_memory_mb: int | None = None


def is_tabular(m: Manifest) -> bool:
    sig = m.input_signature()
    return (len(sig) == 1 and codec(sig[0].kind).tabular
            and len(m.output_signature()) == 1 and tuple(sig[0].columns) == tuple(m.features))


def _not_tabular(x: np.ndarray) -> np.ndarray:
    raise TypeError("this model takes named inputs: score it with inputs_fn")


def load_model(*, root: Path, name: str, alias: str, device: str, max_batch: int,
               sizes: Sizing | None = None,
               on_phase: Callable[[str], None] | None = None) -> LoadedModel:
    """Resolve ``name@alias`` (every file's sha256 verified), load it, and warm it.

    Raises ``IntegrityError``/``VersionNotFound`` (refuse: keep serving the current model) or
    ``RetriableError`` (DFS trouble: try again later).
    """
    return load_ref(root=root, ref=f"{name}@{alias}", device=device, max_batch=max_batch,
                    sizes=sizes, on_phase=on_phase)


def load_ref(*, root: Path, ref: str, device: str, max_batch: int,
             sizes: Sizing | None = None,
             on_phase: Callable[[str], None] | None = None) -> LoadedModel:
    """``load_model`` for any reference ``versions.resolve`` takes (``NAME``, ``NAME:VERSION``,
    ``NAME@ALIAS``). ``on_phase`` hears ``loading model NAME:VERSION`` and ``warming
    NAME:VERSION`` (a big model takes minutes: readiness and the log say so)."""
    try:
        mv = resolve(root, ref)
    except OSError as exc:
        raise RetriableError(f"reading {ref} from the DFS failed: {exc}") from exc
    m = mv.manifest
    phase = _Phases(f"{mv.name}:{mv.version}", m.framework.value, on_phase)
    sizes = sizes or Sizing()
    try:
        m.check_format()
    except ValueError as exc:
        raise PermanentError(str(exc)) from None
    check_signature(m.input_signature())  # every kind registered, with the fields it needs
    if is_tabular(m):
        return _load_tabular(mv.path, mv.name, mv.version, mv.manifest_sha256, m, device,
                             max_batch, phase)
    sig = m.input_signature()
    row_bytes = signature_bytes(sig)
    rows = sizing.batch_rows(batch_size=max_batch, row_bytes=row_bytes,
                             max_batch_bytes=sizes.max_batch_bytes)
    call = sizing.call_rows(batch_rows=rows, row_bytes=row_bytes,
                            device_memory_bytes=sizing.device_memory_bytes(
                                device, sizes.device_memory_mb))
    phase.loading()
    try:
        inputs_fn = adapter_for(m.framework).load_inputs(
            version_path=mv.path, manifest=m, device=device, max_batch=call)
    except OSError as exc:
        raise RetriableError(f"loading {mv.name}:{mv.version} failed: {exc}") from exc
    except (ValueError, RuntimeError, KeyError, TypeError) as exc:
        raise PermanentError(f"{mv.name}:{mv.version} does not load: {exc}") from exc
    model = LoadedModel(
        name=mv.name, version=mv.version, manifest=m, manifest_sha256=mv.manifest_sha256,
        fn=_not_tabular, features=tuple(m.features), classes=tuple(m.classes),
        label_json=tuple(json.dumps(c) for c in m.classes), signature=sig,
        outputs=m.output_signature(), inputs_fn=inputs_fn, batch_rows=rows)
    phase.warming()
    warm_inputs(model, call_rows=call)
    precision.AGREEMENT.reset(model.ref)  # warm-up zeros are no evidence
    return model


class _Phases:
    """Says (log line and ``on_phase``) that a version starts loading, then warming."""

    def __init__(self, ref: str, framework: str,
                 on_phase: Callable[[str], None] | None) -> None:
        self.ref, self.framework = ref, framework
        self.on_phase = on_phase or (lambda phase: None)
        self.t0 = time.perf_counter()

    def loading(self) -> None:
        self.t0 = time.perf_counter()
        log.info("loading model %s (%s, on the %s runtime)", self.ref, self.framework,
                 runtime())
        self.on_phase(f"loading model {self.ref}")

    def warming(self) -> None:
        log.info("model %s loaded in %.2fs; warming it", self.ref, time.perf_counter() - self.t0)
        self.on_phase(f"warming {self.ref}")


def _load_tabular(path: Path, name: str, version: int, sha: str, m: Manifest, device: str,
                  max_batch: int, phase: _Phases | None = None) -> LoadedModel:
    mv_name, mv_version = name, version
    if m.input_dtype != "float32":
        raise PermanentError(f"{mv_name}:{mv_version}: input dtype {m.input_dtype} unsupported")
    phase = phase or _Phases(f"{name}:{version}", m.framework.value, None)
    phase.loading()
    try:
        fn = adapter_for(m.framework).load(version_path=path, manifest=m, device=device,
                                           max_batch=max_batch)
    except OSError as exc:
        raise RetriableError(f"loading {mv_name}:{mv_version} failed: {exc}") from exc
    except (ValueError, RuntimeError, KeyError) as exc:  # framework refuses the files
        raise PermanentError(f"{mv_name}:{mv_version} does not load: {exc}") from exc
    model = LoadedModel(
        name=mv_name, version=mv_version, manifest=m, manifest_sha256=sha,
        fn=fn, features=tuple(m.features), classes=tuple(m.classes),
        label_json=tuple(json.dumps(c) for c in m.classes), signature=m.input_signature(),
        outputs=m.output_signature(), batch_rows=max_batch,
    )
    phase.warming()
    warm(model, max_batch=max_batch)
    precision.AGREEMENT.reset(model.ref)
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


def warm_inputs(model: LoadedModel, *, call_rows: int) -> None:
    """Every bucket once, with inputs of every kind, before the model serves."""
    assert model.inputs_fn is not None
    t0 = time.perf_counter()
    for size in buckets(min(call_rows, WARM_UP_LIMIT)):
        ys = model.inputs_fn({inp.name: codec(inp.kind).empty(inp, size)
                              for inp in model.signature})
        want = [(size, o.width) for o in model.outputs]
        if [y.shape for y in ys] != want:
            raise PermanentError(f"{model.ref}: output shapes {[y.shape[1:] for y in ys]} do "
                                 f"not match the manifest's {[w[1:] for w in want]}")
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
