"""TensorFlow and torch in one process, in an order that cannot abort it.

Triton (which ``torch._dynamo``, ``torch.export`` and torchvision import) brings its own LLVM;
loaded after TensorFlow's (XLA), LLVM aborts the whole process with SIGABRT ("Option
'bitcode-mdindex-threshold' registered more than once"). Loaded first, both work. A scorer
swapping from a TensorFlow model to a torch one, a trainer process, or a test session would die.

The one place: :func:`load_in_safe_order`, called by the ``__init__`` of the only two packages
that may import TensorFlow, Keras, torch or torchvision (``trainers/backends`` and
``scorers/adapters``: the allow-list in ``pyproject.toml``), which Python runs before any module
under them. With both TensorFlow and Triton installed and TensorFlow not loaded yet, Triton is
loaded now (about a second), so the frameworks then load in either order. With TensorFlow loaded
already (a host program imported it first), :func:`before_torch` makes Triton unimportable:
torch then runs without it (only ``torch.compile`` on a GPU uses it).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys


def before_torch() -> None:
    """With TensorFlow loaded and Triton not, make ``import triton`` an ImportError."""
    if "tensorflow" in sys.modules and "triton" not in sys.modules:
        sys.modules["triton"] = None  # type: ignore[assignment]  # import triton: ImportError


def load_in_safe_order() -> None:
    """Triton before TensorFlow where both are installed; else, after it, no Triton at all."""
    if "triton" in sys.modules:
        return
    if "tensorflow" in sys.modules:
        before_torch()
        return
    if importlib.util.find_spec("tensorflow") and importlib.util.find_spec("triton"):
        importlib.import_module("triton")
