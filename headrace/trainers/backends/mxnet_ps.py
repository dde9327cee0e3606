"""MXNet parameter-server training: the ``dist_sync`` kvstore (ps-lite: scheduler, servers,
workers, all configured by ``DMLC_*``).

Importing this module with ``DMLC_ROLE=server`` or ``scheduler`` turns the process into that
node (MXNet starts it on import and exits when the workers finish): that is
``python -m headrace.trainers ps-node``.

Workers push gradients to the servers, which sum them across workers; each worker pulls the sum
and applies the same optimizer update locally, so the optimizer state lives on the workers and
the chief can checkpoint it (MXNet cannot save optimizer state kept on distributed servers). The
loss is scaled by the *global* batch size, so the summed gradient is the mean over the global
batch. Any ``HybridBlock`` works (the wrapped model's ``net``).

The push and pull go through copies of the gradients, with the engine drained in between:
``gluon.Trainer(kvstore=dist_sync, update_on_kvstore=False)`` pushes the gradient arrays
zero-copy and pulls into the same arrays, and with MXNet's threaded engine the workers were
seen to end with different weights (a small CNN, 2 workers; the same run under
``MXNET_ENGINE_TYPE=NaiveEngine`` agreed).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy

numpy.bool = bool  # type: ignore[attr-defined]  # MXNet 1.9 still uses the removed alias

with warnings.catch_warnings():  # MXNet 1.9's import-time NumPy deprecation noise
    warnings.simplefilter("ignore", FutureWarning)  # scoped to this import
    warnings.simplefilter("ignore", DeprecationWarning)  # (scipy.sparse via mxnet too)
    import mxnet as mx
    from mxnet import gluon
import numpy as np  # noqa: E402

from headrace.trainers.backends.mxnet_gluon import PARAMS_FILE, GluonModel  # noqa: E402
from headrace.trainers.distributed.peers import GangMember  # noqa: E402
from headrace.trainers.distributed.weights import checksum  # noqa: E402
from headrace.trainers.inputs import Inputs, as_inputs  # noqa: E402

LOSS_KEY = 1_000_003  # a kvstore key beside the parameters' (0..n-1): the summed batch loss


def exported_checksum(path: Path) -> str:
    """The checksum of a published version's ``model-0000.params``."""
    return checksum([v.asnumpy() for v in mx.nd.load(str(path / PARAMS_FILE)).values()])


class ParameterServerRuntime:
    def __init__(self, member: GangMember) -> None:
        self.member = member
        self.kv = mx.kv.create("dist_sync")

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        yield

    def wrap(self, model: Any) -> PSModel:
        if not isinstance(model, GluonModel):
            raise TypeError(f"parameter servers need a Gluon model, not {type(model).__name__}")
        return PSModel(model, self.kv, self.member)


class PSModel:
    def __init__(self, inner: GluonModel, kv: Any, member: GangMember) -> None:
        self.inner = inner
        self.device = inner.device
        self.member = member
        self.kv = kv
        optimizer = inner.trainer._optimizer  # the one the model was built with
        # Local updates only: the gradients are summed through the kvstore by fit_batch.
        inner.trainer = gluon.Trainer(inner.net.collect_params(), optimizer, kvstore=None)
        self.params = [p for p in inner.net.collect_params().values() if p.grad_req != "null"]
        self.keys = list(range(len(self.params)))
        self._send = [mx.nd.zeros(p.shape, ctx=mx.cpu()) for p in self.params]
        self._recv = [mx.nd.zeros(p.shape, ctx=mx.cpu()) for p in self.params]
        self._loss_in = mx.nd.zeros((1,))
        self._loss_out = mx.nd.zeros((1,))
        # Every worker reaches this once, in the same order (kvstore init is collective): the
        # servers keep the first worker's weights, and every worker starts from them.
        kv.init(LOSS_KEY, self._loss_in)
        for p, buf in zip(self.params, self._send, strict=True):
            p.data().copyto(buf)  # a plain copy (MKL-DNN layouts cannot go to the kvstore)
        mx.nd.waitall()
        kv.init(self.keys, self._send)
        kv.pull(self.keys, out=self._recv)
        mx.nd.waitall()
        for p, r in zip(self.params, self._recv, strict=True):
            p.set_data(r.as_in_context(inner.ctx))

    def fit_batch(self, x: Inputs | np.ndarray, y: np.ndarray) -> float:
        """One synchronous step on the global batch ``x``: this worker feeds its shard."""
        m, inner = self.member, self.inner
        whole = as_inputs(x)
        xs, ys = whole[m.index::m.workers], y[m.index::m.workers]
        weight = 1.0
        if len(ys) == 0:  # a tiny last batch: still take part in the push/pull, with zero weight
            xs, ys, weight = whole[:1], y[:1], 0.0
        loss = inner.recorded_loss(xs, ys, lambda per_row: per_row.sum() * (weight / len(y)))
        loss.backward()
        for p, buf in zip(self.params, self._send, strict=True):
            p.grad().copyto(buf)
        loss.reshape((1,)).copyto(self._loss_in)
        mx.nd.waitall()
        self.kv.push([*self.keys, LOSS_KEY], [*self._send, self._loss_in])
        self.kv.pull([*self.keys, LOSS_KEY], out=[*self._recv, self._loss_out])
        mx.nd.waitall()
        for p, buf in zip(self.params, self._recv, strict=True):
            buf.copyto(p.grad())
        inner.trainer.update(1)  # the gradient is already divided by the global batch
        mx.nd.waitall()
        return inner.reported(float(self._loss_out.asscalar()))

    def predict(self, x: Inputs | np.ndarray) -> np.ndarray:
        return self.inner.predict(x)

    def parameter_count(self) -> int:
        return self.inner.parameter_count()

    def weights(self) -> list[np.ndarray]:
        return [p.data().asnumpy() for p in self.inner.net.collect_params().values()]

    def checksum(self) -> str:
        return checksum(self.weights())

    def save_checkpoint(self, path: Path) -> None:
        self.inner.save_checkpoint(path)

    def load_checkpoint(self, path: Path) -> None:
        # Every worker loads the same checkpoint before the first step; the kvstore's first
        # init then pushes these weights and every worker pulls them.
        self.inner.load_checkpoint(path)

    def export(self, path: Path) -> None:
        self.inner.export(path)
