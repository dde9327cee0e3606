"""Operator caps on training requests: layers, parameters, epochs, GPUs, workers, dataset size.

The caps come from the settings (``HEADRACE_MAX_*``, read once at each entrypoint) and are
checked where a request enters (the control plane, ``headrace train``) and again in the job
(parameters counted on the built model, the dataset's size before it is read). A request over
a cap is refused with one line naming the cap, e.g.
``spec.hidden: 50 hidden layers is over the cap HEADRACE_MAX_LAYERS=32``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

from headrace.contracts import TrainRequested
from headrace.core.errors import RetriableError, ValidationFailed
from headrace.core.settings import Settings
from headrace.store.dfs import resolve_dataset


class OverCap(ValidationFailed):
    """A training request asks for more than an operator cap allows."""


@dataclass(frozen=True)
class RequestCaps:
    """The caps; the defaults equal the settings' defaults."""

    max_layers: int = 32
    max_parameters: int = 100_000_000
    max_epochs: int = 1000
    max_gpus: int = 8
    max_workers: int = 16
    max_dataset_bytes: int = 16 * 1024**3

    @classmethod
    def from_settings(cls, s: Settings) -> RequestCaps:
        return cls(max_layers=s.max_layers, max_parameters=s.max_parameters,
                   max_epochs=s.max_epochs, max_gpus=s.max_gpus, max_workers=s.max_workers,
                   max_dataset_bytes=s.max_dataset_bytes)


def _over(what: str, cap: str, limit: int) -> OverCap:
    return OverCap(f"{what} is over the cap HEADRACE_{cap.upper()}={limit}")


def check_request(req: TrainRequested, caps: RequestCaps) -> None:
    """Refuse a request over a cap (before any model is built)."""
    spec, res = req.spec, req.resources
    if len(spec.hidden) > caps.max_layers:
        raise _over(f"spec.hidden: {len(spec.hidden)} hidden layers", "max_layers",
                    caps.max_layers)
    if spec.epochs > caps.max_epochs:
        raise _over(f"spec.epochs: {spec.epochs} epochs", "max_epochs", caps.max_epochs)
    if res.workers > caps.max_workers:
        raise _over(f"resources.workers: {res.workers} workers", "max_workers",
                    caps.max_workers)
    gpus = res.gpus * res.workers
    if gpus > caps.max_gpus:
        raise _over(f"resources: {gpus} GPUs ({res.gpus} per worker x {res.workers})",
                    "max_gpus", caps.max_gpus)
    # The hidden layers alone give a lower bound on the parameters (no dataset needed).
    estimate = hidden_parameters(spec.hidden)
    if estimate > caps.max_parameters:
        raise _over(f"spec.hidden: at least {estimate} parameters", "max_parameters",
                    caps.max_parameters)


def hidden_parameters(hidden: tuple[int, ...]) -> int:
    """Weights and biases between consecutive hidden layers: a lower bound of an MLP's size."""
    return sum(a * b + b for a, b in itertools.pairwise(hidden)) + sum(hidden[:1])


def check_parameters(count: int, caps: RequestCaps) -> None:
    """Refuse a built model with more parameters than the cap."""
    if count > caps.max_parameters:
        raise _over(f"the built model: {count} parameters", "max_parameters",
                    caps.max_parameters)


def dataset_bytes(root: Path, uri: str) -> int:
    """The dataset's size: one file, or every file of a directory (DFS or object store)."""
    resolved = resolve_dataset(root, uri)
    try:
        if isinstance(resolved, Path):
            if resolved.is_dir():
                return sum(p.stat().st_size for p in resolved.rglob("*") if p.is_file())
            return resolved.stat().st_size
        import pyarrow.fs as pafs

        fs, path = pafs.FileSystem.from_uri(resolved)
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.Directory:
            infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
            return sum(i.size or 0 for i in infos if i.type == pafs.FileType.File)
        return int(info.size or 0)
    except OSError as exc:
        raise RetriableError(f"dataset {uri!r}: size unknown: {exc}") from None


def check_dataset_size(root: Path, uri: str, caps: RequestCaps) -> None:
    size = dataset_bytes(root, uri)
    if size > caps.max_dataset_bytes:
        raise _over(f"dataset {uri!r}: {size} bytes", "max_dataset_bytes",
                    caps.max_dataset_bytes)
