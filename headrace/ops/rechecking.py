"""Would a dead letter fail again? Run its bytes through every scorer stage that needs no
model: decode and validate, with the scorer's own ``decode_inputs`` against the production
version's input signature read from its manifest on the DFS (the model's files are neither
loaded nor hashed), before a redrive sends it back (``headrace dlq redrive --dry-run``).

Each letter is one of: "would fail again (STAGE): why", "would pass decode and validate" or
"not checked: why" (it failed in or after the model, or no manifest could be read); the
summary counts the three apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from headrace.core.errors import HeadraceError
from headrace.ops.deadletters import AGAIN, PASS, UNCHECKED, Letter
from headrace.scorers.wire.inputs import Signature, decode_inputs
from headrace.store import versions
from headrace.streams import dlq as dlqh
from headrace.streams.consuming import RawBatch

CHECKED_STAGES = ("decode", "validate")


def recheck(root: Path, model: str, letters: Sequence[Letter]) -> dict[str, str]:
    """Per letter ref: its verdict (see the module's doc)."""
    try:
        ref, signature = _signature(root, model)
    except HeadraceError as exc:
        return {lt.ref: f"{UNCHECKED}: {exc}" for lt in letters}
    out: dict[str, str] = {}
    for lt in letters:
        if lt.stage not in CHECKED_STAGES:
            out[lt.ref] = f"{UNCHECKED}: it failed at stage {lt.stage}, in or after the model"
            continue
        out[lt.ref] = _check_one(lt, signature, ref)
    return out


def _signature(root: Path, model: str) -> tuple[str, Signature]:
    """The production version's input signature, from its manifest alone."""
    name, _, ver = model.partition(":")
    if ver.isdigit():
        version = int(ver)
    else:
        pointer = versions.read_alias(root, name)
        if pointer is None:
            raise versions.VersionNotFound(f"model {name} has no production version (give "
                                           "--model NAME:VERSION)")
        version = pointer.version
    m, _ = versions.read_manifest(versions.model_dir(root, name) / str(version))
    return f"{name}:{version}", tuple(m.input_signature())


def _check_one(lt: Letter, signature: Signature, ref: str) -> str:
    batch = RawBatch([lt.record.value or b""], [None], [lt.record.topic],
                     np.zeros(1, np.int32), np.zeros(1, np.int64), np.full(1, -1, np.int64),
                     [None])
    row = lt.h(dlqh.DLQ_ROW)
    try:
        decoded = decode_inputs(batch, signature)
    except HeadraceError as exc:
        return f"{AGAIN} ({exc.stage or 'decode'}) with {ref}: {exc}"
    bad = [b for b in decoded.bad if row is None or b.row is None or str(b.row) == row]
    if bad:
        return f"{AGAIN} ({bad[0].stage}) with {ref}: {bad[0].error}"
    return f"{PASS} with {ref}"
