"""``torch.export`` programs (``torch.export.save``: ``.pt2``), served as they are by the scorer's
torch adapter (the format Headrace's own torch versions have). The batch dimension must be
dynamic; inputs are float32."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

from headrace.core.errors import ValidationFailed
from headrace.core.llvm_guard import before_torch
from headrace.core.types import Framework
from headrace.imports.converted import Converted
from headrace.imports.declarations import Declarations
from headrace.imports.formats import torch_common
from headrace.imports.signature import Seen, Unmappable, check_declared, map_input, outputs_for
from headrace.imports.sources import ImportSource

NAME = "torch.export"
SUFFIXES = (".pt2",)
FILE = "model.pt2"


def claims(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in SUFFIXES and zipfile.is_zipfile(path)


def convert(source: ImportSource, into: Path, declared: Declarations) -> Converted:
    before_torch()  # torch after TensorFlow in one process: see core.llvm_guard
    import torch

    try:
        program = torch.export.load(str(source.path))
    except Exception as exc:  # torch raises RuntimeError, ValueError, ... for a bad archive
        raise ValidationFailed(f"{source.uri} is not a torch.export program: "
                               f"{str(exc).strip().splitlines()[0]}") from None
    user = [s.arg.name for s in program.graph_signature.input_specs
            if s.kind == torch.export.graph_signature.InputKind.USER_INPUT]
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    check_declared(declared, user)
    inputs = []
    for name in user:
        val = nodes[name].meta.get("val")
        if val is None or not hasattr(val, "shape"):
            raise Unmappable(f"input {name!r} is not a tensor: no codec feeds it")
        if val.dtype != torch.float32:
            raise Unmappable(f"input {name!r} is {val.dtype}: the torch adapter feeds float32")
        dims = [d if isinstance(d, int) else -1 for d in val.shape]
        if not dims or dims[0] != -1:
            raise Unmappable(f"input {name!r} was exported with a fixed batch of "
                             f"{dims[0] if dims else 0} rows: export with a dynamic batch "
                             f"dimension (torch.export.Dim in dynamic_shapes)")
        inputs.append(map_input(Seen(name, "float", tuple(dims[1:])), declared))
    into.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source.path, into / FILE)
    widths = torch_common.widths(program.module(), inputs)
    task, classes, outputs = outputs_for(widths, model_classes=(), declared=declared)
    return Converted(framework=Framework.TORCH, model_format="torch.export/1", directory=into,
                     inputs=tuple(inputs), outputs=outputs, task=task, classes=classes,
                     record={"format": NAME, "library": f"torch {torch.__version__}"})
