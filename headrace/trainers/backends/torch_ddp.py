"""Synchronous data-parallel PyTorch: ``DistributedDataParallel`` over ``torch.distributed``
(NCCL when the worker has a GPU, else gloo).

The rendezvous is the all-reduce gang's ``TF_CONFIG`` that both executors already give every
worker (loopback ports locally; the gang's headless Service names on Kubernetes): worker 0's
``host:port`` is the TCP store, the worker's index its rank. Every worker walks the same global
batches in the same order and feeds rows ``rank::workers`` of each; each rank's loss is its
rows' summed loss over the *global* batch size (times the world size, which DDP's gradient
average divides out), so the update is the mean gradient of the global batch, whatever the
shard sizes. Only the chief writes checkpoints and every worker restores from the same one:
model, optimizer, learning rate and the step count. The random stream of each step (dropout)
is seeded from the seed, the step and the rank, so a resumed gang draws what the uninterrupted
one would have: resume is bit-exact on every rank.
"""

from __future__ import annotations

import atexit
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from headrace.contracts import Task
from headrace.trainers.backends.torch_nn import CHECKPOINT_FILE, MODEL_FILE, TorchModel
from headrace.trainers.distributed.peers import GangMember, rendezvous
from headrace.trainers.distributed.weights import checksum
from headrace.trainers.inputs import Inputs, as_inputs


def exported_checksum(path: Path) -> str:
    """The checksum of a published version's ``model.pt2`` (its parameters)."""
    module = torch.export.load(path / MODEL_FILE).module()
    return checksum([p.detach().cpu().numpy() for p in module.parameters()])


class DataParallelRuntime:
    def __init__(self, member: GangMember) -> None:
        if member.threads:
            torch.set_num_threads(member.threads)
        self.member = member
        host, port = rendezvous(os.environ)
        gpu = torch.cuda.is_available()
        if gpu:
            torch.cuda.set_device(member.index % torch.cuda.device_count())
        dist.init_process_group("nccl" if gpu else "gloo", init_method=f"tcp://{host}:{port}",
                                rank=member.index, world_size=member.workers)
        atexit.register(_leave)

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        yield

    def wrap(self, model: Any) -> DataParallelModel:
        if not isinstance(model, TorchModel):
            raise TypeError(f"DDP needs a torch model, not {type(model).__name__}")
        return DataParallelModel(model, self.member)


def _leave() -> None:
    with contextlib.suppress(Exception):
        if dist.is_initialized():
            dist.destroy_process_group()


class DataParallelModel:
    def __init__(self, inner: TorchModel, member: GangMember) -> None:
        self.inner = inner
        self.device = inner.device
        self.member = member
        self.steps = 0
        self.seed = int(torch.initial_seed())
        gpu = inner.dev.type == "cuda"
        # Broadcasts rank 0's initial weights: every rank starts identical.
        self.ddp = DistributedDataParallel(inner.net, device_ids=[inner.dev] if gpu else None)

    def fit_batch(self, x: Inputs | np.ndarray, y: np.ndarray) -> float:
        """One synchronous step on the global batch ``x``; this rank feeds its own rows."""
        rank, world = self.member.index, self.member.workers
        whole = as_inputs(x)
        mine, ym = whole[rank::world], y[rank::world]
        torch.manual_seed((self.seed * 1_000_003 + self.steps) * 4099 + rank)
        inner = self.inner
        inner.net.train()
        inner.optimizer.zero_grad(set_to_none=True)
        out = self.ddp(*inner.tensors(mine))
        if inner.task == Task.REGRESSOR:
            target = torch.from_numpy(np.asarray(ym, np.float32)).to(inner.dev)
            total = torch.nn.functional.mse_loss(out.reshape(-1), target, reduction="sum")
        else:
            labels = torch.from_numpy(np.asarray(ym, np.int64)).to(inner.dev)
            total = torch.nn.functional.cross_entropy(out, labels, reduction="sum")
        (total * (world / len(y))).backward()  # DDP averages over ranks: the global mean
        inner.optimizer.step()
        self.steps += 1
        loss = total.detach().reshape(1)
        dist.all_reduce(loss)  # every rank reports the global batch's mean loss
        return float(loss) / len(y)

    def predict(self, x: Inputs | np.ndarray) -> np.ndarray:
        return self.inner.predict(x)

    def parameter_count(self) -> int:
        return self.inner.parameter_count()

    def checksum(self) -> str:
        return checksum([p.detach().cpu().numpy() for p in self.inner.net.parameters()])

    def save_checkpoint(self, path: Path) -> None:
        state = self.inner.state()
        state["steps"] = self.steps
        self.inner.save_state(path / CHECKPOINT_FILE, state)

    def load_checkpoint(self, path: Path) -> None:
        state = torch.load(path / CHECKPOINT_FILE, map_location=self.inner.dev,
                           weights_only=True)
        self.inner.load_state(state)
        self.steps = int(state.get("steps", 0))

    def export(self, path: Path) -> None:
        self.inner.export(path)
