"""Import a registered model package inside the job process, from bytes just verified.

The job (never the control plane) calls :func:`load`: it re-checks every file's hash
(``headrace.store.code.verify``), writes the verified bytes into a private temporary
directory and imports ``module:function`` from there under a namespaced package name
(``_headrace_code_<name>_<12 hex>``), so two versions in one process never collide and
``sys.path`` is not touched. Inside the package, import your own modules relatively
(``from . import layers``). No bytecode is written.

The backends call :func:`resolve_builder` in their ``create`` when ``spec.model`` is a
:class:`CodeRef`. The contract (docs/training.md):

* TensorFlow: ``build(spec, inputs) -> keras.Model`` giving ``[batch, n_outputs]`` raw scores
  (logits; the trainer adds softmax for a classifier). Optional ``preprocess(spec, inputs) ->
  list of keras layers``: applied to the raw input before the model, adapted on the training
  rows when they have ``adapt`` (e.g. ``keras.layers.Normalization``), part of the export.
* MXNet: ``build(spec, inputs) -> gluon.HybridBlock`` giving raw scores, likewise.
* PyTorch: ``build(spec, inputs) -> torch.nn.Module`` giving raw scores, likewise (exported
  with ``torch.export``).

``spec`` is a :class:`BuildSpec`; ``inputs`` the model's input signature
(``headrace.store.signature.ModelInput``; a tabular dataset gives one numeric input
``features`` of shape ``(n_features,)``).
"""

from __future__ import annotations

import atexit
import importlib
import importlib.machinery
import importlib.util
import logging
import re
import shutil
import sys
import tempfile
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headrace.contracts import CodeRef, ModelSpec, Task
from headrace.core.errors import PermanentError
from headrace.store import code
from headrace.store.signature import ModelInput


class CodeLoadError(PermanentError):
    """The package could not be imported or its entrypoint is missing."""


class UserCodeError(CodeLoadError):
    """Your code raised (at import, in ``build`` or ``preprocess``): the same every attempt,
    so never retried; its full traceback is in the job's log (``headrace jobs logs``)."""


log = logging.getLogger("headrace.job")


def user_error(ref: str, what: str, exc: BaseException, where: Path | None) -> UserCodeError:
    """Log the traceback (package paths shown as ``<ref>/<file>``) and return the one-line
    error naming the innermost line of your code that raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if where is not None:
        text = text.replace(str(where), ref)
    log.error("your code raised %s:\n%s", what, text.rstrip())
    mine = [f for f in frames if where is not None and f.filename.startswith(str(where))]
    at = ""
    if mine:
        at = f" at {mine[-1].filename.replace(str(where), ref)}:{mine[-1].lineno}"
    line = (str(exc).strip().splitlines() or [""])[0]
    return UserCodeError(f"code {ref}: {what} raised {type(exc).__name__}: {line}{at} "
                         f"(traceback in `headrace jobs logs`)")


@dataclass(frozen=True)
class BuildSpec:
    """What ``build(spec, inputs)`` receives."""

    task: Task
    n_outputs: int  # classes for a classifier, 1 for a regressor
    seed: int
    hyperparameters: dict[str, float | int | str | bool]
    model_spec: ModelSpec  # the whole request spec (hidden, activation, learning_rate, ...)


@dataclass(frozen=True)
class LoadedCode:
    ref: CodeRef
    version: code.CodeVersion
    build: Callable[..., Any]
    preprocess: Callable[..., Any] | None
    inputs: tuple[ModelInput, ...]
    hyperparameters: dict[str, float | int | str | bool] = field(default_factory=dict)

    def call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run your ``build``/``preprocess``; what it raises is a permanent UserCodeError."""
        try:
            return fn(*args)
        except Exception as exc:
            raise user_error(self.version.ref, what, exc, _where(self.version)) from None

    def spec_for(self, spec: ModelSpec, n_outputs: int) -> BuildSpec:
        return BuildSpec(task=spec.task, n_outputs=n_outputs, seed=spec.seed,
                         hyperparameters=dict(self.hyperparameters), model_spec=spec)

    def manifest_fields(self) -> dict[str, Any]:
        return {"ref": self.version.ref, "name": self.version.name,
                "sha256": self.version.digest, "entrypoint": self.ref.entrypoint,
                "files": self.version.files}


_LOADED: dict[tuple[str, str], LoadedCode] = {}


def load(*, root: Path, ref: CodeRef, inputs: tuple[ModelInput, ...],
         hyperparameters: dict[str, float | int | str | bool] | None = None) -> LoadedCode:
    """Verify, import and register the package named by ``ref`` (in the job process only)."""
    version, files = code.verify(root, ref.code)
    code.check_entrypoint(files, ref)
    module_name, _, func_name = ref.entrypoint.partition(":")
    module = _import(version, files, module_name)
    build = getattr(module, func_name, None)
    if not callable(build):
        raise CodeLoadError(f"entrypoint {ref.entrypoint}: {func_name} is not a function")
    pre = getattr(module, "preprocess", None)
    loaded = LoadedCode(ref=ref, version=version, build=build,
                        preprocess=pre if callable(pre) else None, inputs=inputs,
                        hyperparameters=dict(hyperparameters or {}))
    _LOADED[(ref.code, ref.entrypoint)] = loaded
    return loaded


def resolve_builder(spec: ModelSpec) -> LoadedCode:
    """The user's builder for ``spec`` (loaded earlier in this process by :func:`load`)."""
    ref = spec.model
    if not isinstance(ref, CodeRef):
        raise CodeLoadError(f"model {ref!r} is not a code reference")
    try:
        return _LOADED[(ref.code, ref.entrypoint)]
    except KeyError:
        raise CodeLoadError(f"code {ref.code} was not verified and loaded in this job") from None


def namespace(version: code.CodeVersion) -> str:
    return f"_headrace_code_{re.sub(r'[^a-z0-9_]', '_', version.name)}_{version.digest[:12]}"


def _where(version: code.CodeVersion) -> Path | None:
    """The private directory the package was imported from."""
    pkg = sys.modules.get(namespace(version))
    paths = list(getattr(pkg, "__path__", []) or [])
    return Path(paths[0]) if paths else None


def _import(version: code.CodeVersion, files: dict[str, bytes], module: str) -> types.ModuleType:
    ns = namespace(version)
    pkg = sys.modules.get(ns)
    if pkg is None:
        # Only the verified bytes are imported: a private copy, not the DFS directory.
        where = Path(tempfile.mkdtemp(prefix=f"{ns}-"))
        atexit.register(shutil.rmtree, where, True)
        for rel, data in files.items():
            (where / rel).parent.mkdir(parents=True, exist_ok=True)
            (where / rel).write_bytes(data)
        spec = importlib.machinery.ModuleSpec(ns, None, is_package=True)
        spec.submodule_search_locations = [str(where)]
        pkg = importlib.util.module_from_spec(spec)
        sys.modules[ns] = pkg
    before = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        return importlib.import_module(f"{ns}.{module}")
    except Exception as exc:  # user code: any error is the package's (permanent)
        raise user_error(version.ref, f"importing {module}", exc, _where(version)) from None
    finally:
        sys.dont_write_bytecode = before
