"""Call :func:`before_torch` before importing torch where TensorFlow may be loaded already.

Triton (which ``torch._dynamo``, ``torch.export`` and torchvision import) brings its own LLVM;
loaded after TensorFlow's (XLA), LLVM aborts the whole process ("Option ... registered more than
once"). A scorer swapping from a TensorFlow model to a torch one, or a test session, would die.
With TensorFlow loaded, triton is made unimportable: torch then runs without it (it is used
only by ``torch.compile`` on a GPU).
"""

from __future__ import annotations

import sys


def before_torch() -> None:
    if "tensorflow" in sys.modules and "triton" not in sys.modules:
        sys.modules["triton"] = None  # type: ignore[assignment]  # import triton: ImportError
