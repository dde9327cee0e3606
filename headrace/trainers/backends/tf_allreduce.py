"""Synchronous data-parallel TensorFlow: ``MultiWorkerMirroredStrategy`` (collective all-reduce).

Keras 3's ``fit``/``train_on_batch`` fail under this strategy (PerReplica to Tensor), so the
step is custom: ``strategy.run`` + ``GradientTape`` + ``tf.nn.compute_average_loss`` with the
*global* batch size; the optimizer sums the gradients across workers, which makes the update the
mean gradient of the global batch. Any compiled ``keras.Model`` built inside :meth:`scope` works
(its ``loss`` and ``optimizer`` are used as compiled).

Every worker walks the same global batches in the same order; each replica -- a worker, or
each local GPU of a worker with several -- feeds rows ``r::replicas`` of each (``r`` its global
replica id, through ``experimental_distribute_values_from_function``), so no replica trains on
another's rows. Collectives run over NCCL when the worker has GPUs, else the gRPC ring (the
multi-GPU path is untested here: these machines have no GPU). Only the chief writes
checkpoints, but every worker restores from the same one: weights and optimizer variables in
``weights.npz``.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from headrace.trainers.backends.tensorflow_keras import KerasModel
from headrace.trainers.distributed.peers import GangMember
from headrace.trainers.distributed.weights import checksum
from headrace.trainers.inputs import Inputs, as_inputs

WEIGHTS = "weights.npz"


def exported_checksum(path: Path) -> str:
    """The checksum of a published version's ``model.keras``."""
    m = keras.models.load_model(path / "model.keras", compile=False)
    return checksum([np.asarray(w) for w in m.get_weights()])


class AllReduceRuntime:
    """Created first thing in a worker process (TF must not have run an op yet)."""

    def __init__(self, member: GangMember) -> None:
        if member.threads:
            tf.config.threading.set_intra_op_parallelism_threads(member.threads)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        self.member = member
        impl = tf.distribute.experimental.CommunicationImplementation
        gpus = tf.config.list_physical_devices("GPU")
        opts = tf.distribute.experimental.CommunicationOptions(
            implementation=impl.NCCL if gpus else impl.RING)
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=opts)

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        with self.strategy.scope():
            yield

    def wrap(self, model: Any) -> AllReduceModel:
        if not isinstance(model, KerasModel):
            raise TypeError(f"all-reduce needs a Keras model, not {type(model).__name__}")
        return AllReduceModel(model, self.strategy, self.member)


def _per_example(loss: Any) -> Any:
    """The compiled loss as a per-example function."""
    fn = keras.losses.get(loss) if isinstance(loss, str) else loss
    if isinstance(fn, keras.losses.Loss):
        return fn.call
    return fn


class AllReduceModel:
    def __init__(self, inner: KerasModel, strategy: Any, member: GangMember) -> None:
        self.inner = inner
        self.device = inner.device
        self.member = member
        self.strategy = strategy
        km = inner.model
        if km.optimizer is None or km.loss is None:
            raise TypeError("the Keras model must be compiled (loss and optimizer)")
        self._loss = _per_example(km.loss)
        self._step = tf.function(self._global_step, reduce_retracing=True)

    @property
    def keras_model(self) -> keras.Model:
        return self.inner.model

    def _replica_step(self, x: tf.Tensor, y: tf.Tensor, gb: tf.Tensor) -> tf.Tensor:
        km = self.inner.model
        with tf.GradientTape() as tape:
            pred = km(x, training=True)
            yy = tf.reshape(y, (-1, 1)) if pred.shape.rank == 2 and pred.shape[-1] == 1 else y
            loss = tf.nn.compute_average_loss(self._loss(yy, pred), global_batch_size=gb)
            if km.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(km.losses))
        grads = tape.gradient(loss, km.trainable_variables)
        km.optimizer.apply_gradients(zip(grads, km.trainable_variables, strict=True))
        return loss

    def _global_step(self, x: tf.Tensor, y: tf.Tensor, gb: tf.Tensor) -> tf.Tensor:
        per_replica = self.strategy.run(self._replica_step, args=(x, y, gb))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    def fit_batch(self, x: Inputs | np.ndarray, y: np.ndarray) -> float:
        """One synchronous step on the global batch ``x``: each of this worker's replicas
        feeds its own rows of it."""
        whole, n = as_inputs(x), self.strategy.num_replicas_in_sync

        def shard(ctx: Any) -> tuple[Any, Any]:
            r = ctx.replica_id_in_sync_group
            return self.inner.feed(whole[r::n].arrays()), tf.convert_to_tensor(y[r::n])

        xs, ys = self.strategy.experimental_distribute_values_from_function(shard)
        loss = self._step(xs, ys, tf.constant(len(y), tf.int64))
        return float(loss)

    def predict(self, x: Inputs | np.ndarray) -> np.ndarray:
        return self.inner.predict(x)

    def parameter_count(self) -> int:
        return self.inner.parameter_count()

    def weights(self) -> list[np.ndarray]:
        return [np.asarray(w) for w in self.inner.model.get_weights()]

    def checksum(self) -> str:
        return checksum(self.weights())

    def save_checkpoint(self, path: Path) -> None:
        km = self.inner.model
        arrays = {f"w{i}": np.asarray(v) for i, v in enumerate(km.get_weights())}
        arrays.update({f"o{i}": np.asarray(v.numpy())
                       for i, v in enumerate(km.optimizer.variables)})
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        with open(path / WEIGHTS, "wb") as f:
            f.write(buf.getvalue())
            f.flush()
            os.fsync(f.fileno())

    def load_checkpoint(self, path: Path) -> None:
        km = self.inner.model
        with np.load(path / WEIGHTS) as data:
            km.set_weights([data[f"w{i}"] for i in range(len(km.weights))])
            with self.strategy.scope():
                km.optimizer.build(km.trainable_variables)
            for i, v in enumerate(km.optimizer.variables):
                v.assign(data[f"o{i}"])

    def export(self, path: Path) -> None:
        self.inner.export(path)
