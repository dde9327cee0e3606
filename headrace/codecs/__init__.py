"""One codec per input kind, in one registry (``registry.py``), one module per kind.

A kind's module owns every piece of its life: validation and inference at ``datasets put``, the
training-time decode and learned statistics, the preprocessing exported inside the model (Keras
layers; the MXNet graph's constants, forward step and host feed), the scorer's decode from
Arrow, JSON and raw bytes, how ``send`` types its fields and how ``tail`` shows them.
Everything else dispatches through ``codec(kind)``. Adding a kind is one module calling
``register`` (tests/codecs registers a toy one and runs it from a dataset through training to a
prediction).

The built-in kinds register on import here. An unforced column is of the first kind whose
``infer`` claims it, by ``infer_rank`` (text, strings of several words, before category).
"""

from __future__ import annotations

from headrace.codecs import category, image, numeric, tensor, text
from headrace.codecs.registry import (
    REGISTRY,
    Codec,
    UnknownKind,
    check_signature,
    codec,
    inferring,
    keras_feeder,
    kind,
    register,
    vocabulary_file,
)
from headrace.codecs.stats import InputStats

BUILT_IN = (numeric.CODEC, category.CODEC, tensor.CODEC, image.CODEC, text.CODEC)


def kinds_listed() -> str:
    """The input kinds for a message: "numeric, category, tensor, image or text" (and any
    kind registered since)."""
    names = [c.kind for c in BUILT_IN] + [k for k in REGISTRY if k not in
                                           {c.kind for c in BUILT_IN}]
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]

__all__ = ["BUILT_IN", "REGISTRY", "Codec", "InputStats", "UnknownKind", "check_signature",
           "codec", "inferring", "keras_feeder", "kind", "kinds_listed", "register",
           "vocabulary_file"]
