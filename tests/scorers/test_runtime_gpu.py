"""On a GPU (marked ``gpu``; skipped without CUDA): a Keras image model loaded by the torch and
JAX runtimes on ``gpu:0`` gives the CPU's scores (the pinned staging buffer reused across
batches of several sizes). TensorFlow-free, as the GPU machines are: the model is built and saved
by Keras on the torch backend, in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.gpu

SCRIPT = r"""
import json, os, sys
from pathlib import Path
import numpy as np
runtime, root = sys.argv[1], Path(sys.argv[2])
from headrace.scorers.adapters import select_runtime
select_runtime(runtime)
import keras
from headrace.scorers.engine.models import load_ref
from headrace.store.manifest import Manifest
from headrace.store.signature import InputKind, ModelInput, ModelOutput, OutputKind
from headrace.store.versions import publish, set_alias

classes = tuple("0123456789")
keras.utils.set_random_seed(0)
with keras.device("cpu"):
    inp = keras.Input((32, 32, 3), name="image")
    x = keras.layers.Rescaling(1 / 255)(inp)
    x = keras.layers.Conv2D(16, 3, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inp, keras.layers.Dense(10, activation="softmax")(x))
m = Manifest(name="g", framework="tensorflow", task="classifier", features=(), label="y",
             classes=classes, family="cnn",
             inputs=(ModelInput(name="image", kind=InputKind.IMAGE, height=32, width=32,
                                channels=3, shape=(32, 32, 3)),),
             outputs=(ModelOutput(name="y", kind=OutputKind.CLASSES, classes=classes),))
mv = publish(root, m, lambda d: model.save(d / "model.keras"))
set_alias(root, "g", mv.version)
x = np.random.default_rng(0).uniform(0, 255, (200, 32, 32, 3)).astype(np.float32)
out = {}
for dev in ("cpu", "gpu:0"):
    fn = load_ref(root=root, ref="g", device=dev, max_batch=128).inputs_fn
    out[dev] = np.concatenate([fn({"image": x[a:b]})[0] for a, b in ((0, 100), (100, 103),
                                                                    (103, 200))])
print("RESULT " + json.dumps({"max_diff": float(np.abs(out["cpu"] - out["gpu:0"]).max()),
                              "same_labels": bool((out["cpu"].argmax(1)
                                                   == out["gpu:0"].argmax(1)).all())}))
"""


def _cuda() -> bool:
    if not Path("/dev/nvidiactl").exists():  # no NVIDIA driver: not even torch is imported
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.skipif(not _cuda(), reason="needs a CUDA device")
@pytest.mark.parametrize("runtime", ["torch", "jax"])
def test_the_gpu_gives_the_cpus_scores(runtime: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run([sys.executable, "-c", SCRIPT, runtime, str(tmp_path)], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, out.stderr[-3000:]
    got = json.loads(lines[-1][7:])
    assert got["same_labels"] and got["max_diff"] < 1e-3, got
