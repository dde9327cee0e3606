"""Tiny real models with a signature (images, tensors, text, several inputs and outputs),
published in the store's layout, and the digits images they score."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from headrace.store import tokens
from headrace.store.manifest import Manifest
from headrace.store.signature import InputKind, ModelInput, ModelOutput, OutputKind
from headrace.store.versions import ModelVersion, publish, set_alias

DIGITS = tuple(str(d) for d in range(10))
IMAGE = ModelInput(name="image", kind=InputKind.IMAGE, height=8, width=8, channels=1)


def digits(n: int) -> np.ndarray:
    """The first ``n`` scikit-learn digits as uint8 (n, 8, 8) images, 0..255."""
    from sklearn.datasets import load_digits

    x = load_digits().images[:n]
    return np.clip(np.rint(x * (255 / 16)), 0, 255).astype(np.uint8)


def encode(img: np.ndarray, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img, "L").save(buf, format=fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    return buf.getvalue()


def decoded(data: bytes) -> np.ndarray:
    """How the image reads back (a JPEG is lossy): float32 (8, 8, 1)."""
    return np.asarray(Image.open(io.BytesIO(data)).convert("L"), np.float32)[..., None]


def _manifest(name: str, framework: str, inputs: tuple[ModelInput, ...],
              outputs: tuple[ModelOutput, ...], **kw: Any) -> Manifest:
    first = outputs[0]
    return Manifest(name=name, framework=framework,
                    task="classifier" if first.kind == OutputKind.CLASSES else "regressor",
                    features=kw.pop("features", ()), label="y", classes=first.classes,
                    inputs=inputs, outputs=outputs, family=kw.pop("family", "cnn"), **kw)


def _publish(root: Path, manifest: Manifest, save: Any, alias: bool) -> ModelVersion:
    mv = publish(root, manifest, save)
    if alias:
        set_alias(root, manifest.name, mv.version)
    return mv


def tf_digits(root: Path, name: str, *, seed: int = 0, alias: bool = True
              ) -> tuple[ModelVersion, Any]:
    import keras

    keras.utils.set_random_seed(seed)
    inp = keras.Input((8, 8, 1), name="image")
    x = keras.layers.Rescaling(1 / 255)(inp)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(16, activation="relu")(x)
    out = keras.layers.Dense(10, activation="softmax")(x)
    model = keras.Model(inp, out)
    outputs = (ModelOutput(name="digit", kind=OutputKind.CLASSES, classes=DIGITS),)
    m = _manifest(name, "tensorflow", (IMAGE,), outputs)
    return _publish(root, m, lambda d: model.save(d / "model.keras"), alias), model


def tf_rgb_digits(root: Path, name: str) -> tuple[ModelVersion, Any]:
    """A tiny untrained Keras model taking 8x8 RGB images (for grey-into-colour inputs)."""
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 3), name="image")
    out = keras.layers.Dense(10, activation="softmax")(keras.layers.Flatten()(inp))
    model = keras.Model(inp, out)
    image = ModelInput(name="image", kind=InputKind.IMAGE, height=8, width=8, channels=3)
    outputs = (ModelOutput(name="digit", kind=OutputKind.CLASSES, classes=DIGITS),)
    m = _manifest(name, "tensorflow", (image,), outputs)
    return _publish(root, m, lambda d: model.save(d / "model.keras"), True), model


def seeded_mxnet(seed: int) -> Any:
    """``mxnet``, imported after setting the NumPy alias MXNet 1.9 needs, its RNG seeded."""
    import numpy

    if not hasattr(numpy, "bool"):
        numpy.bool = bool  # type: ignore[attr-defined]
    import mxnet as mx

    mx.random.seed(seed)
    return mx


def mx_digits(root: Path, name: str, *, seed: int = 0, alias: bool = True
              ) -> tuple[ModelVersion, Any]:
    mx = seeded_mxnet(seed)

    class Net(mx.gluon.nn.HybridBlock):
        def __init__(self) -> None:
            super().__init__()
            self.hidden = mx.gluon.nn.Dense(16, activation="relu")
            self.out = mx.gluon.nn.Dense(10)

        def hybrid_forward(self, F: Any, x: Any) -> Any:
            x = F.transpose(x, axes=(0, 3, 1, 2)) / 255.0  # NHWC in, channels first inside
            return F.softmax(self.out(self.hidden(F.flatten(x))))

    net = Net()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.zeros((1, 8, 8, 1)))
    outputs = (ModelOutput(name="digit", kind=OutputKind.CLASSES, classes=DIGITS),)
    m = _manifest(name, "mxnet", (IMAGE,), outputs)
    return _publish(root, m, lambda d: net.export(str(d / "model"), epoch=0), alias), net


GRID = ModelInput(name="grid", kind=InputKind.TENSOR, dtype="float32", shape=(4, 3))


def tf_tensor(root: Path, name: str, *, alias: bool = True) -> tuple[ModelVersion, Any]:
    import keras

    keras.utils.set_random_seed(1)
    inp = keras.Input((4, 3), name="grid")
    out = keras.layers.Dense(2, activation="softmax")(keras.layers.Flatten()(inp))
    model = keras.Model(inp, out)
    outputs = (ModelOutput(name="scores", kind=OutputKind.CLASSES, classes=("no", "yes")),)
    m = _manifest(name, "tensorflow", (GRID,), outputs, family="mlp")
    return _publish(root, m, lambda d: model.save(d / "model.keras"), alias), model


def mx_tensor(root: Path, name: str, *, alias: bool = True) -> tuple[ModelVersion, Any]:
    mx = seeded_mxnet(5)

    class Net(mx.gluon.nn.HybridBlock):
        def __init__(self) -> None:
            super().__init__()
            self.out = mx.gluon.nn.Dense(2)

        def hybrid_forward(self, F: Any, x: Any) -> Any:
            return F.softmax(self.out(F.flatten(x)))

    net = Net()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.zeros((1, 4, 3)))
    outputs = (ModelOutput(name="scores", kind=OutputKind.CLASSES, classes=("no", "yes")),)
    m = _manifest(name, "mxnet", (GRID,), outputs, family="mlp")
    return _publish(root, m, lambda d: net.export(str(d / "model"), epoch=0), alias), net


VOCAB = ("good", "bad", "great", "awful", "fine", "movie", "plot", "the")
TEXT = ModelInput(name="text", kind=InputKind.TEXT, dtype="string", max_length=8)


def tf_text(root: Path, name: str, *, alias: bool = True) -> tuple[ModelVersion, Any]:
    """A TensorFlow text model of the old layout: TextVectorization in its graph."""
    import keras

    keras.utils.set_random_seed(2)
    inp = keras.Input((1,), dtype="string", name="text")
    x = keras.layers.TextVectorization(max_tokens=20, output_sequence_length=8,
                                       vocabulary=list(VOCAB))(inp)
    x = keras.layers.Embedding(20, 4)(x)
    x = keras.layers.GlobalAveragePooling1D()(x)
    out = keras.layers.Dense(3, activation="softmax")(x)
    model = keras.Model(inp, out)
    outputs = (ModelOutput(name="sentiment", kind=OutputKind.CLASSES,
                           classes=("neg", "neutral", "pos")),)
    # As versions before host-side ids were written: format 1, no vocabulary file.
    m = _manifest(name, "tensorflow", (TEXT,), outputs, family="text", format_version=1)
    return _publish(root, m, lambda d: model.save(d / "model.keras"), alias), model


def tf_text_ids(root: Path, name: str, *, alias: bool = True) -> tuple[ModelVersion, Any]:
    """A TensorFlow text model as the trainer makes it now: the text family's body over the
    ids of tokens and hashed bigrams the text codec makes (int32 in, vocabulary file shipped)."""
    import pyarrow as pa

    from headrace.codecs import codec
    from headrace.contracts import Framework, ModelSpec
    from headrace.trainers.backends.tensorflow_keras import BACKEND
    from headrace.trainers.inputs import Inputs, ModelPlan, export_signature, learn_stats

    texts = [" ".join(VOCAB[(i + j) % len(VOCAB)] for j in range(i % 5 + 1)) for i in range(40)]
    spec = ModelSpec(model="text", max_length=8)
    inp, values = codec(InputKind.TEXT).dataset_input(
        ("text",), pa.table({"text": pa.array(texts, pa.string())}), spec)
    outputs = (ModelOutput(name="sentiment", kind=OutputKind.CLASSES,
                           classes=("neg", "neutral", "pos")),)
    plan = ModelPlan("text", (inp,), outputs, 3,
                     learn_stats(Inputs({"text": values}, (inp,)), max_tokens=20))
    model = BACKEND.create(spec=spec, n_features=0, n_outputs=3, seed=2, plan=plan)
    m = _manifest(name, "tensorflow", export_signature(plan, Framework.TENSORFLOW), outputs,
                  family="text")
    return _publish(root, m, model.export, alias), model


META = ModelInput(name="meta", kind=InputKind.NUMERIC, columns=("age", "size"))
TWELVE = tuple(f"c{i}" for i in range(12))


def tf_two_inputs(root: Path, name: str, *, alias: bool = True) -> tuple[ModelVersion, Any]:
    """An image plus numeric metadata in; a 12-class head and a regression head out."""
    import keras

    keras.utils.set_random_seed(3)
    img = keras.Input((8, 8, 1), name="image")
    meta = keras.Input((2,), name="meta")
    x = keras.layers.Concatenate()([keras.layers.Flatten()(keras.layers.Rescaling(1 / 255)(img)),
                                    meta])
    x = keras.layers.Dense(16, activation="relu")(x)
    kind = keras.layers.Dense(12, activation="softmax", name="kind")(x)
    size = keras.layers.Dense(1, name="weight")(x)
    model = keras.Model({"image": img, "meta": meta}, [kind, size])
    outputs = (ModelOutput(name="kind", kind=OutputKind.CLASSES, classes=TWELVE),
               ModelOutput(name="weight", kind=OutputKind.VALUES, shape=(1,)))
    m = _manifest(name, "tensorflow", (IMAGE, META), outputs)
    return _publish(root, m, lambda d: model.save(d / "model.keras"), alias), model


MX_TEXT = ModelInput(name="review", kind=InputKind.TEXT, dtype="string", max_length=6,
                     vocabulary="vocab.json")


def mx_text_and_meta(root: Path, name: str, *, alias: bool = True) -> tuple[ModelVersion, Any]:
    """MXNet: token ids of a text (from the version's vocabulary file) plus numeric metadata
    in; a 3-class head and a regression head out."""
    import numpy

    if not hasattr(numpy, "bool"):
        numpy.bool = bool  # type: ignore[attr-defined]
    import mxnet as mx

    mx.random.seed(4)

    class Net(mx.gluon.nn.HybridBlock):
        def __init__(self) -> None:
            super().__init__()
            self.embed = mx.gluon.nn.Embedding(len(VOCAB) + 2, 4)
            self.cls = mx.gluon.nn.Dense(3)
            self.reg = mx.gluon.nn.Dense(1)

        def hybrid_forward(self, F: Any, ids: Any, meta: Any) -> Any:
            x = F.concat(F.mean(self.embed(ids), axis=1), meta, dim=1)
            return F.softmax(self.cls(x)), self.reg(x)

    net = Net()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.zeros((1, 6)), mx.nd.zeros((1, 2)))
    outputs = (ModelOutput(name="sentiment", kind=OutputKind.CLASSES,
                           classes=("neg", "neutral", "pos")),
               ModelOutput(name="stars", kind=OutputKind.VALUES, shape=(1,)))
    m = _manifest(name, "mxnet", (MX_TEXT, META), outputs, family="text")

    def save(d: Path) -> None:
        tokens.write_vocabulary(d / "vocab.json", VOCAB)
        net.export(str(d / "model"), epoch=0)

    return _publish(root, m, save, alias), net
