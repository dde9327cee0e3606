"""``image``: encoded JPEG/PNG bytes, decoded by the one image decode (``store.images``) to
float32 ``(height, width, channels)`` in 0..255, the same in training and scoring; rescaled to
0..1 inside the model (an MXNet export also turns it channels first there)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from headrace.codecs import columns, json_values
from headrace.codecs.arrow_types import ColumnError, is_binary
from headrace.codecs.registry import (
    Codec,
    float_input,
    floats,
    no_constants,
    nothing_learned,
    register,
    row_shape,
)
from headrace.codecs.stats import InputStats
from headrace.contracts import ModelSpec, families
from headrace.store.signature import InputKind, ModelInput
from headrace.streams.summaries import summarise  # encoded images, big tensors


def _dataset_input(names: tuple[str, ...], table: pa.Table, spec: ModelSpec
                   ) -> tuple[ModelInput, np.ndarray]:
    from headrace.codecs import training_images  # Pillow: only when images are read

    (name,) = names
    blobs = np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=object)
    h, w, ch = training_images.probe(blobs[0])
    if spec.image_size is not None:
        h, w = spec.image_size
    fam = families.TABLE.get(spec.model) if isinstance(spec.model, str) else None
    least = fam.min_image_size if fam is not None else 1
    if min(h, w) < least:
        raise ColumnError(f"images are {h}x{w}; model {spec.model} needs at least "
                          f"{least}x{least}: set image_size")
    return ModelInput(name=name, kind=InputKind.IMAGE, shape=(h, w, ch), height=h, width=w,
                      channels=ch, preprocessing=("rescale_0_1",)), blobs


def _check(inp: ModelInput) -> None:
    if None in (inp.height, inp.width, inp.channels):
        raise ValueError(f"image input {inp.name!r} needs height, width and channels")


def _decode(inp: ModelInput, blobs: np.ndarray) -> np.ndarray:
    from headrace.codecs import training_images

    assert inp.height and inp.width and inp.channels
    return training_images.decode(blobs, height=inp.height, width=inp.width,
                                  channels=inp.channels)


def _keras(keras: Any, inp: ModelInput, x: Any, st: InputStats) -> Any:
    return keras.layers.Rescaling(1.0 / 255, name=f"rescale_{inp.name}")(x)


def _forward(F: Any, inp: ModelInput, x: Any, consts: dict[str, Any], st: InputStats) -> Any:
    return F.transpose(x, axes=(0, 3, 1, 2)) / 255.0


def _empty(inp: ModelInput, n: int) -> np.ndarray:
    return np.zeros((n, *inp.row_shape), np.float32)


CODEC = register(Codec(
    InputKind.IMAGE.value,
    infer=lambda col: is_binary(col.type), accepts=lambda col: is_binary(col.type),
    nulls=False, dataset_input=_dataset_input, check=_check,
    # The stored bytes suit any image input: each decodes them to its own size.
    train_decode=_decode, learn=nothing_learned, relayout=lambda got, want, v: v,
    family_kind=InputKind.IMAGE.value, spatial=lambda inp: True,
    keras_input=float_input, keras_preprocess=_keras,
    vocabulary=False,
    mxnet_export=lambda inp: inp.model_copy(
        update={"preprocessing": (*inp.preprocessing, "to_channels_first")}),
    mxnet_feed=floats, mxnet_feed_shape=row_shape, mxnet_constants=no_constants,
    mxnet_forward=_forward,
    torch_forward=lambda torch, inp, x, consts, st: x.permute(0, 3, 1, 2) / 255.0,
    build=columns.present(columns.image, _empty), from_json=json_values.image_bytes,
    json_type=lambda inp: pa.string(), send_as=None, summary=summarise, reparse=True,
    raw_types=("image/jpeg", "image/png")))
