"""What the Keras runtimes share: the backend choice, loading a ``model.keras`` for a backend,
and the checks that refuse a model a backend cannot run. Imports no framework itself.

Keras reads ``KERAS_BACKEND`` once, at its import, so the choice is made in the environment
before that import; a process whose Keras was already imported with another backend is refused
(a scorer process serves one runtime).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from headrace.codecs import codec
from headrace.codecs.feeds import keras_ids
from headrace.core.errors import ConfigError, PermanentError
from headrace.store.manifest import Manifest

MODEL_FILE = "model.keras"


def choose(backend: str) -> None:
    """Make ``backend`` Keras's backend in this process (before Keras is imported)."""
    keras = sys.modules.get("keras")
    if keras is None:
        os.environ["KERAS_BACKEND"] = backend
        return
    check_backend(keras, backend)


def check_backend(keras: Any, backend: str) -> None:
    """Refuse to serve on a Keras imported with another backend (one chosen too late)."""
    have = keras.backend.backend()
    if have != backend:
        raise ConfigError(f"Keras was imported with the {have} backend before the {backend} "
                          f"runtime was chosen; run this runtime in a process of its own")


def load_model(version_path: Path, manifest: Manifest, backend: str) -> Any:
    """The version's Keras model on ``backend``, after refusing inputs it cannot take."""
    refuse_strings(manifest, backend)
    import keras  # the adapter imported it with the backend set

    try:
        return keras.saving.load_model(version_path / MODEL_FILE, compile=False)
    except FileNotFoundError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, ImportError) as exc:
        raise PermanentError(f"its model.keras does not load on the {backend} runtime: "
                             f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                             ) from exc


def refuse_strings(manifest: Manifest, backend: str) -> None:
    """String inputs (text or categories looked up inside the graph) are TensorFlow's alone;
    those whose ids the host makes (a vocabulary file in the manifest) run anywhere."""
    strings = [inp.name for inp in manifest.input_signature()
               if codec(inp.kind).strings and not codec(inp.kind).keras_fed(inp, True)]
    if strings:
        raise PermanentError(f"input {strings[0]!r} takes strings, which only the tensorflow "
                             f"runtime feeds; the {backend} runtime cannot run this model")


def host_feed(manifest: Manifest, version_path: Path) -> Callable[[dict[str, np.ndarray]],
                                                                   dict[str, np.ndarray]]:
    """The decoded inputs -> the arrays the model takes (ids made on the host, each input in
    the dtype the model casts from)."""
    feeders = {inp.name: keras_ids(inp, version_path) for inp in manifest.input_signature()}
    dtypes: dict[str, np.dtype[Any]] = {
        inp.name: np.dtype(np.int32 if feeders[inp.name] else codec(inp.kind).dtype(inp))
        for inp in manifest.input_signature()}

    def fed(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {}
        for k, dtype in dtypes.items():
            f = feeders[k]
            out[k] = np.asarray(inputs[k] if f is None else f(inputs[k]), dtype)
        return out

    return fed


def as_outputs(y: Any, names: list[str]) -> list[Any]:
    """A model's output(s) as a list in the manifest's output order."""
    if isinstance(y, dict):
        return [y[n] for n in names]
    return list(y) if isinstance(y, list | tuple) else [y]


def feed(model: Any, x: dict[str, Any]) -> Any:
    """One input: the array itself; several: the dict by name (a functional model's call)."""
    if len(x) == 1 and len(getattr(model, "inputs", None) or ()) <= 1:
        return next(iter(x.values()))
    return x
