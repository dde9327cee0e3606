"""Torch loaded into a process that has TensorFlow already (a scorer swapping from a TensorFlow
model to a torch one; a test session): triton's LLVM, which ``torch._dynamo`` and torchvision
import, aborted the whole process ("Option ... registered more than once")."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SWAP = """
import tensorflow
from headrace.scorers.adapters import adapter_for
from headrace.trainers.backends import get_backend
adapter_for("torch")
get_backend("torch")
import torch._dynamo, torchvision
print("alive")
"""


@pytest.mark.slow
def test_torch_after_tensorflow_in_one_process_does_not_abort() -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run([sys.executable, "-c", SWAP], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0 and "alive" in out.stdout, out.stderr[-2000:]
