"""Would a dead letter fail again? Decode its bytes as the scorer would now, with the stream's
production model, before a redrive sends it back (``headrace dlq redrive --dry-run``).

Only letters that failed before the model ran (stages ``decode`` and ``validate``) can be
checked this way; the others are reported as not checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from headrace.codecs import REGISTRY
from headrace.core.errors import HeadraceError
from headrace.ops.deadletters import Letter
from headrace.scorers.decoding import decode
from headrace.store.versions import resolve
from headrace.streams import dlq as dlqh
from headrace.streams.consuming import RawBatch

CHECKED_STAGES = ("decode", "validate")


def recheck(root: Path, model: str, letters: Sequence[Letter]) -> dict[str, str]:
    """Per letter ref: ``"would fail again: REASON"``, ``"decodes now"`` or ``"not checked:
    WHY"``."""
    try:
        mv = resolve(root, model)
    except HeadraceError as exc:
        return {lt.ref: f"not checked: {exc}" for lt in letters}
    inputs = mv.manifest.input_signature()
    c = REGISTRY.get(str(inputs[0].kind)) if len(inputs) == 1 else None
    if c is None or not c.tabular:
        return {lt.ref: "not checked: the model takes more than numeric columns"
                for lt in letters}
    features = list(inputs[0].columns)
    out: dict[str, str] = {}
    for lt in letters:
        if lt.stage not in CHECKED_STAGES:
            out[lt.ref] = f"not checked: it failed at stage {lt.stage}, in or after the model"
            continue
        out[lt.ref] = _decode_one(lt, features, f"{mv.name}:{mv.version}")
    return out


def _decode_one(lt: Letter, features: list[str], ref: str) -> str:
    batch = RawBatch([lt.record.value or b""], [None], [lt.record.topic],
                     np.zeros(1, np.int32), np.zeros(1, np.int64), np.full(1, -1, np.int64),
                     [None])
    row = lt.h(dlqh.DLQ_ROW)
    bad = [b for b in decode(batch, features).bad
           if row is None or b.row is None or str(b.row) == row]
    if bad:
        return f"would fail again with {ref}: {bad[0].error}"
    return f"decodes now with {ref}"
