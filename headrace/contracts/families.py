"""The one family table: every built-in model family, the builder of its body per framework,
the input kinds it accepts and the hyperparameters (ModelSpec fields) it reads.

Admission (``ModelSpec.model``, ``headrace train -p``) and the parity test
(tests/trainers/test_family_table.py: each framework's registry holds exactly these builders)
derive from this table, so a family missing in one framework is refused before any job starts
instead of failing inside one. The table names frameworks only; where each framework's builders
live is the trainers' registry (trainers/backends/family_builders.py), so reading the table
imports no framework.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

# What every model reads, a family or your own code: the training loop's settings.
TRAINING_HYPERPARAMETERS = ("epochs", "batch_size", "learning_rate", "validation_split", "seed",
                            "checkpoint_every_steps", "patience", "lr_schedule", "dropout",
                            "drift_window", "drift_false_alarm_rate")
IMAGE_INPUTS = frozenset({"image", "tensor"})
# Framework values (core.types.Framework) that build every built-in family.
ALL_FRAMEWORKS = frozenset({"tensorflow", "mxnet", "torch"})


@dataclass(frozen=True)
class Family:
    name: str
    inputs: frozenset[str]  # input kinds (store.signature.InputKind values) it accepts
    hyperparameters: tuple[str, ...]  # the family's own ModelSpec fields
    frameworks: frozenset[str]  # framework values with a builder of this family
    single: bool = True  # takes exactly one input (mlp: any number)
    spatial: bool = False  # its one input is laid out as an image (the input's codec says if)
    min_image_size: int = 1  # the smallest image side it builds for

    def valid_hyperparameters(self) -> tuple[str, ...]:
        return tuple(sorted({*TRAINING_HYPERPARAMETERS, *self.hyperparameters}))


def _application(name: str) -> Family:
    # Keras Applications / Gluon zoo nets need at least 32x32.
    return Family(name, IMAGE_INPUTS, ("image_size", "init_weights"), ALL_FRAMEWORKS, spatial=True,
                  min_image_size=32)


TABLE: Mapping[str, Family] = MappingProxyType({f.name: f for f in (
    Family("mlp", frozenset({"numeric", "category", "tensor"}), ("hidden", "activation"),
           ALL_FRAMEWORKS, single=False),
    Family("cnn", IMAGE_INPUTS, ("filters", "hidden", "image_size", "init_weights"), ALL_FRAMEWORKS,
           spatial=True),
    Family("text", frozenset({"text"}),
           ("embedding_dim", "max_tokens", "max_length", "hidden", "activation"), ALL_FRAMEWORKS),
    *(_application(n) for n in ("mobilenet_v2", "resnet50", "mobilenet", "vgg16")),
)})

FAMILIES = tuple(TABLE)


def family(name: str) -> Family:
    """The family ``name``; ValueError (one line, listing them) for an unknown one."""
    try:
        return TABLE[name]
    except KeyError:
        raise ValueError(f"unknown model family {name!r}: use one of "
                         f"{', '.join(FAMILIES)}") from None


def supports(name: str, framework: str) -> bool:
    return framework in family(name).frameworks
