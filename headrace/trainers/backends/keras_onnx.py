"""A published Keras version (``model.keras``) as ONNX: Keras's own ``model.export(format=
"onnx")``, which converts the model's traced TensorFlow graph with ``tf2onnx`` (the ``onnx``
extra; it works with TensorFlow 2.21 and NumPy 1.26 and 2, Keras patching tf2onnx for NumPy 2).

The ONNX graph takes what ``model.keras`` takes, by input name (text as its codec's ids; numbers
and images as decoded): the ``keras`` feed of ``codecs.feeds``. A version with a string input
(categories, looked up inside the graph by ``StringLookup``) is refused: tf2onnx leaves that
lookup as ``LookupTableFindV2``, an op ONNX Runtime does not have.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np

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
    model(keras.tree.map_structure(_zeros, model.input), training=False)  # export needs a call
    with warnings.catch_warnings():  # Keras's tf2onnx patch probes np.object (FutureWarning)
        warnings.simplefilter("ignore", FutureWarning)
        model.export(str(out), format="onnx", verbose=False, opset_version=OPSET)
    import onnx

    graph = onnx.load(str(out), load_external_data=False).graph
    names = [i.name for i in graph.input]
    if len(signature) == 1 and len(names) == 1:
        return names
    if sorted(names) != sorted(i.name for i in signature):
        raise ValidationFailed(f"the ONNX graph's inputs {names} are not the signature's "
                               f"{[i.name for i in signature]}")
    return [i.name for i in signature]


def _zeros(t: Any) -> np.ndarray:
    """One row of zeros shaped and typed as the Keras input ``t`` (unknown sizes: 1)."""
    return np.zeros((1, *(d or 1 for d in t.shape[1:])), str(t.dtype))
