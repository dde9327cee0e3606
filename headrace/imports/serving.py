"""An imported model called exactly as a scorer calls it: through the scorer's adapter for its
framework (``scorers.adapters``), on the staged files, before the version is published."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from headrace.codecs import codec
from headrace.core.errors import ValidationFailed
from headrace.scorers.adapters import adapter_for
from headrace.scorers.engine.models import is_tabular
from headrace.store.manifest import Manifest

Served = Callable[[dict[str, np.ndarray]], np.ndarray]  # decoded inputs -> first output
MAX_BATCH = 8192


def served(directory: Path, manifest: Manifest) -> Served:
    """The model's first output on decoded inputs by name, as the scorer computes it (the
    tabular fast path for one numeric input, as ``engine.models.load_ref`` chooses)."""
    adapter = adapter_for(manifest.framework)
    try:
        if is_tabular(manifest):
            fn = adapter.load(version_path=directory, manifest=manifest, device="cpu",
                              max_batch=MAX_BATCH)
            (inp,) = manifest.input_signature()
            return lambda x: fn(np.ascontiguousarray(x[inp.name], np.float32))
        inputs_fn = adapter.load_inputs(version_path=directory, manifest=manifest,
                                        device="cpu", max_batch=MAX_BATCH)
    except (ValueError, RuntimeError, KeyError, TypeError) as exc:
        raise ValidationFailed(f"the scorer cannot load the imported model: "
                               f"{str(exc).strip().splitlines()[0]}") from None
    return lambda x: inputs_fn(x)[0]


def synthetic(manifest: Manifest, rows: int, seed: int = 0) -> dict[str, np.ndarray] | None:
    """Random rows of every input (standard normal numbers), or None when an input is not
    numbers (a category's or text's values cannot be made up)."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for inp in manifest.input_signature():
        c = codec(inp.kind)
        if c.strings:
            return None
        out[inp.name] = rng.normal(size=(rows, *inp.row_shape)).astype(c.dtype(inp))
    return out
