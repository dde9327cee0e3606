"""What the TorchScript and ``torch.export`` importers share: the module probed on two empty
rows for its outputs' widths, fed as the scorer's torch adapter feeds it (float32, inputs in
signature order)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from headrace.imports.signature import Unmappable
from headrace.store.signature import ModelInput


def widths(module: Any, inputs: Sequence[ModelInput]) -> list[tuple[str, int]]:
    import torch

    xs = [torch.zeros((2, *inp.row_shape), dtype=torch.float32) for inp in inputs]
    try:
        with torch.inference_mode():
            ys = module(*xs)
    except Exception as exc:  # the module's own code raises whatever it raises
        raise Unmappable(f"the module does not run on its inputs as mapped "
                         f"({', '.join(f'{i.name}: {i.kind} {list(i.row_shape)}' for i in inputs)}"
                         f"): {str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}"
                         ) from None
    ys = list(ys) if isinstance(ys, list | tuple) else [ys]
    out = []
    for i, y in enumerate(ys):
        if not isinstance(y, torch.Tensor) or not y.is_floating_point():
            raise Unmappable(f"output {i} is not a float tensor: no codec reads it")
        out.append((f"output{i}", int(np.prod(y.shape[1:])) if y.dim() > 1 else 1))
    return out
