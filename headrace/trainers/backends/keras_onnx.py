"""A published Keras version (``model.keras``) as ONNX: its inference function traced by
TensorFlow, weights and captured constants frozen into the graph, converted by ``tf2onnx`` (the
``onnx`` extra; tf2onnx 1.17 works with TensorFlow 2.21 on NumPy 1.26 and 2).

The ONNX graph takes what ``model.keras`` takes, by input name (text and categories as their
codecs' ids; numbers and images as decoded): the ``keras`` feed of ``codecs.feeds``. A version
before model format 2 whose graph looks strings up itself (``StringLookup``,
``TextVectorization``) is refused: tf2onnx leaves that lookup as ``LookupTableFindV2``, an op
ONNX Runtime does not have.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras

from headrace.codecs import codec, keras_feeder
from headrace.core.errors import ValidationFailed
from headrace.store.manifest import Manifest
from headrace.trainers.backends.tensorflow_keras import MODEL_FILE

OPSET = 17
FEED = "keras"


def export(version_path: Path, manifest: Manifest, out: Path) -> list[str]:
    """Write ``out``; the graph's input names in signature order."""
    signature = manifest.input_signature()
    strings = [i.name for i in signature  # strings the host does not turn into ids
               if codec(i.kind).strings and keras_feeder(i, (), exported=True) is None]
    if strings:
        raise ValidationFailed(f"input {strings[0]!r} takes strings, looked up inside the Keras "
                               f"graph: tf2onnx cannot convert that lookup for ONNX Runtime")
    if importlib.util.find_spec("tf2onnx") is None:
        raise ValidationFailed("exporting a Keras model to ONNX needs tf2onnx: pip install "
                               "'headrace[onnx]'")
    model = keras.saving.load_model(version_path / MODEL_FILE, compile=False)
    names = _convert(model, out)
    if len(signature) == 1 and len(names) == 1:
        return names
    by_input = {n.split(":")[0]: n for n in names}
    if sorted(by_input) != sorted(i.name for i in signature):
        raise ValidationFailed(f"the ONNX graph's inputs {names} are not the signature's "
                               f"{[i.name for i in signature]}")
    return [by_input[i.name] for i in signature]


def _convert(model: Any, out: Path) -> list[str]:
    """The model's inference graph, its weights and captured constants frozen in, as ONNX;
    the graph's input names. Keras's own ``model.export(format="onnx")`` leaves constants a
    layer captured (a ``Normalization`` given its mean and variance) as graph inputs."""
    import tensorflow as tf
    import tf2onnx
    from keras.src.export.tf2onnx_lib import patch_tf2onnx

    patch_tf2onnx()  # Keras's fixes of tf2onnx's NumPy 2 gaps (np.object, np.cast ...)
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    ins = list(model.inputs)
    specs = [tf.TensorSpec((None, *t.shape[1:]), t.dtype, name=t.name.split(":")[0])
             for t in ins]
    if len(specs) == 1:
        fn = tf.function(lambda x: model(x, training=False), input_signature=specs)
    else:
        keys = [s.name for s in specs]
        fn = tf.function(lambda *xs: model(dict(zip(keys, xs, strict=True)), training=False),
                         input_signature=specs)
    frozen = convert_variables_to_constants_v2(fn.get_concrete_function())
    with warnings.catch_warnings():  # tf2onnx probes np.object (FutureWarning)
        warnings.simplefilter("ignore", FutureWarning)
        tf2onnx.convert.from_graph_def(
            frozen.graph.as_graph_def(), input_names=[t.name for t in frozen.inputs],
            output_names=[t.name for t in frozen.outputs], opset=OPSET, output_path=str(out))
    import onnx

    return [i.name for i in onnx.load(str(out), load_external_data=False).graph.input]
