"""What a format's importer hands on: the files a scorer adapter serves, and their signature."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from headrace.core.types import Framework, Task
from headrace.store.signature import ModelInput, ModelOutput

# The source model's own scores on decoded inputs (by input name), for the conversion check.
Reference = Callable[[dict[str, np.ndarray]], np.ndarray]


@dataclass(frozen=True)
class Converted:
    framework: Framework
    model_format: str
    directory: Path  # the served files, copied as they are into the version
    inputs: tuple[ModelInput, ...]
    outputs: tuple[ModelOutput, ...]
    task: Task
    classes: tuple[str, ...]
    record: dict[str, Any] = field(default_factory=dict)  # how it was converted
    extra: dict[str, Any] = field(default_factory=dict)  # manifest extra an adapter reads
    reference: Reference | None = None  # None: served in the source's own format
