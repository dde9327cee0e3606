"""TensorFlow and torch in one process, through Headrace's own modules, in either order: Triton's
LLVM (which ``torch._dynamo`` and torchvision import) loaded after TensorFlow's aborted the whole
process ("Option ... registered more than once"). Each order runs in a fresh interpreter, the
way a scorer swapping frameworks, a trainer process or a test worker would meet it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

TENSORFLOW = """
from headrace.trainers.backends import tf_allreduce, tensorflow_keras
from headrace.scorers.adapters import tensorflow
"""
TORCH = """
from headrace.trainers.backends import torch_ddp, torch_families  # torchvision
from headrace.scorers.adapters import pytorch
import torch._dynamo
"""
REPORT = """
import sys
print("alive", "triton" if sys.modules.get("triton") is not None else "no-triton")
"""
ORDERS = {
    # Headrace's ML packages load Triton first: torch keeps it (torch.compile works).
    "tensorflow-then-torch": (TENSORFLOW + TORCH, "triton"),
    "torch-then-tensorflow": (TORCH + TENSORFLOW, "triton"),
    # A host program imported TensorFlow before Headrace: torch runs without Triton.
    "host-tensorflow-then-torch": ("import tensorflow\n" + TORCH + TENSORFLOW, "no-triton"),
}


@pytest.mark.slow
@pytest.mark.parametrize("order", list(ORDERS))
def test_tensorflow_and_torch_load_in_either_order_without_aborting(order: str) -> None:
    code, triton = ORDERS[order]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run([sys.executable, "-c", code + REPORT], capture_output=True, text=True,
                         env=env, timeout=300, check=False)
    assert out.returncode == 0, f"exit {out.returncode}: {out.stderr[-2000:]}"
    assert out.stdout.split()[-2:] == ["alive", triton], out.stdout
