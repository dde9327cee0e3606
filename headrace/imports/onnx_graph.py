"""An ONNX graph made servable: its inputs mapped to codecs, its outputs reduced to score
tensors (a ZipMap's dictionaries back to the probabilities it wrapped, label outputs dropped),
its classes read from the graph, and written as the version's ``model.onnx`` with the record the
onnxruntime adapter feeds it by (``extra.onnx``)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from headrace.codecs import codec
from headrace.codecs.feeds import decoded, onnx_cast
from headrace.core.types import Framework
from headrace.imports.converted import Converted, Reference
from headrace.imports.declarations import Declarations
from headrace.imports.signature import Seen, Unmappable, check_declared, map_input, outputs_for
from headrace.store.signature import ModelInput

FILE = "model.onnx"
FEED = "decoded"
FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16}
INTS = {onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT8,
        onnx.TensorProto.UINT8, onnx.TensorProto.INT16}
CLASSIFIERS = ("TreeEnsembleClassifier", "LinearClassifier", "SVMClassifier",
               "TreeEnsemble")  # nodes that name their classes


def _element(vi: onnx.ValueInfoProto) -> str:
    kind = vi.type.WhichOneof("value")
    if kind != "tensor_type":
        return str(kind).removesuffix("_type")  # sequence, map, ...
    t = vi.type.tensor_type.elem_type
    if t in FLOATS:
        return "float"
    if t in INTS or t == onnx.TensorProto.BOOL:
        return "int"
    if t == onnx.TensorProto.STRING:
        return "string"
    return str(onnx.TensorProto.DataType.Name(t)).lower()


def _dims(vi: onnx.ValueInfoProto) -> list[int]:
    return [d.dim_value if d.HasField("dim_value") else -1
            for d in vi.type.tensor_type.shape.dim]


def _seen(vi: onnx.ValueInfoProto) -> Seen:
    element = _element(vi)
    dims = _dims(vi) if vi.type.WhichOneof("value") == "tensor_type" else []
    if element in ("float", "int", "string") and len(dims) < 2:
        raise Unmappable(f"input {vi.name!r} ({element}) has rank {len(dims)}: the graph must "
                         f"take a batch of rows, [N, ...]")
    return Seen(name=vi.name, element=element, shape=tuple(dims[1:]))


def _labels(node: onnx.NodeProto) -> tuple[str, ...]:
    for a in node.attribute:
        if a.name == "classlabels_strings" and a.strings:
            return tuple(s.decode() for s in a.strings)
        if a.name == "classlabels_int64s" and a.ints:
            return tuple(str(i) for i in a.ints)
    return ()


def _strip_zipmap(graph: onnx.GraphProto) -> tuple[str, ...]:
    """Replace each ZipMap output by the probabilities it wraps; the classes it names."""
    classes: tuple[str, ...] = ()
    for node in [n for n in graph.node if n.op_type == "ZipMap"]:
        classes = classes or _labels(node)
        probs, out = node.input[0], node.output[0]
        graph.node.remove(node)
        for i, o in enumerate(graph.output):
            if o.name == out:
                graph.output.remove(o)
                graph.output.insert(i, onnx.helper.make_tensor_value_info(
                    probs, onnx.TensorProto.FLOAT, None))
    return classes


def _score_outputs(graph: onnx.GraphProto) -> None:
    """Keep the score tensors: drop label outputs (int or string) beside them; refuse what is
    neither."""
    elements = {o.name: _element(o) for o in graph.output}
    scores = [n for n, e in elements.items() if e == "float"]
    if not scores:
        said = ", ".join(f"{n}: {e}" for n, e in elements.items())
        raise Unmappable(f"the model's outputs ({said}) hold no scores: a float output is "
                         f"needed")
    for o in list(graph.output):
        e = elements[o.name]
        if e in ("int", "string"):
            graph.output.remove(o)
        elif e != "float":
            raise Unmappable(f"output {o.name!r} is a {e}: no codec reads it")


def served_graph(model: onnx.ModelProto, declared: Declarations, *, into: Path,
                 feature_names: Sequence[str] = (), classes: Sequence[str] = (),
                 record: dict[str, Any] | None = None,
                 reference: Reference | None = None) -> Converted:
    graph = model.graph
    inits = {i.name for i in graph.initializer}
    graph_inputs = [i for i in graph.input if i.name not in inits]
    check_declared(declared, [i.name for i in graph_inputs])
    inputs = tuple(map_input(_seen(i), declared, feature_names=feature_names)
                   for i in graph_inputs)
    found = _strip_zipmap(graph)
    for node in graph.node:
        if node.op_type in CLASSIFIERS:
            found = found or _labels(node)
    _score_outputs(graph)
    into.mkdir(parents=True, exist_ok=True)
    path = into / FILE
    onnx.save(model, str(path))
    widths = _probe(path, inputs, [i.name for i in graph_inputs])
    task, names, outputs = outputs_for(widths, model_classes=tuple(classes) or found,
                                       declared=declared)
    feed = {"file": FILE, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "feed": FEED, "inputs": [i.name for i in graph_inputs],
            "opset": max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                         default=0)}
    return Converted(framework=Framework.ONNX, model_format="onnx/1", directory=into,
                     inputs=inputs, outputs=outputs, task=task, classes=names,
                     record={"producer": f"{model.producer_name} {model.producer_version}".strip(),
                             **(record or {})},
                     extra={"onnx": feed}, reference=reference)


def _probe(path: Path, inputs: Sequence[ModelInput], graph_names: Sequence[str]
           ) -> list[tuple[str, int]]:
    """Each output's name and width, from ONNX Runtime on two empty rows."""
    import onnxruntime as ort

    try:
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own classes, one per cause
        raise Unmappable(f"ONNX Runtime does not load the model: "
                         f"{str(exc).strip().splitlines()[0]}") from None
    types = {i.name: str(i.type) for i in sess.get_inputs()}
    feed = {g: onnx_cast(decoded(inp, path.parent)(codec(inp.kind).empty(inp, 2)), types[g])
            for inp, g in zip(inputs, graph_names, strict=True)}
    try:
        ys = sess.run(None, feed)
    except Exception as exc:
        raise Unmappable(f"ONNX Runtime cannot run the model on its inputs as mapped "
                         f"({', '.join(f'{i.name}: {i.kind}' for i in inputs)}): "
                         f"{str(exc).strip().splitlines()[0]}") from None
    return [(o.name, int(np.asarray(y).reshape(2, -1).shape[1]))
            for o, y in zip(sess.get_outputs(), ys, strict=True)]
