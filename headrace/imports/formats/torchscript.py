"""TorchScript modules (``torch.jit.save``), served as they are by the scorer's torch adapter
(``torchscript/1``). TorchScript keeps no input shapes: every input is declared
(``--input x:numeric=a,b,c`` or ``x:tensor=28x28``)."""

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

NAME = "torchscript"
SUFFIXES = (".pt", ".ts", ".pth")
FILE = "model.ts"


def claims(path: Path) -> bool:
    if not (path.is_file() and zipfile.is_zipfile(path)):
        return False
    with zipfile.ZipFile(path) as z:
        return any(n.endswith("/constants.pkl") for n in z.namelist())


def convert(source: ImportSource, into: Path, declared: Declarations) -> Converted:
    before_torch()  # torch after TensorFlow in one process: see core.llvm_guard
    import torch

    try:
        module = torch.jit.load(str(source.path), map_location="cpu").eval()
    except Exception as exc:  # torch raises RuntimeError for an archive it cannot read
        raise ValidationFailed(f"{source.uri} is not a TorchScript module: "
                               f"{str(exc).strip().splitlines()[0]}") from None
    args = [a.name for a in module.forward.schema.arguments[1:]]  # after self
    check_declared(declared, args)
    inputs = []
    for name in args:
        d = declared.input(name)
        if d is None:
            raise Unmappable(f"input {name!r} of the TorchScript module: declare it with "
                             f"--input {name}:numeric=COLUMNS or {name}:tensor=SHAPE "
                             f"(TorchScript keeps no shapes)")
        shape = (len(d.columns),) if d.columns else d.shape
        inputs.append(map_input(Seen(name, "float", shape), declared))
    into.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source.path, into / FILE)
    widths = torch_common.widths(module, inputs)
    task, classes, outputs = outputs_for(widths, model_classes=(), declared=declared)
    return Converted(framework=Framework.TORCH, model_format="torchscript/1", directory=into,
                     inputs=tuple(inputs), outputs=outputs, task=task, classes=classes,
                     record={"format": NAME, "library": f"torch {torch.__version__}"})
