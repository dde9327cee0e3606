"""Which distributed strategy a request gets: one validated, framework-free decision.

``auto`` is all-reduce for TensorFlow (MultiWorkerMirroredStrategy) and PyTorch
(DistributedDataParallel) and parameter servers for MXNet (the ``dist_sync`` kvstore). The other
combinations are refused with one line:

* TensorFlow + ``parameter_server``: ``tf.distribute.ParameterServerStrategy`` is a different
  program, not another strategy for the same loop: the chief alone runs the training loop and
  schedules each step onto workers through a ``ClusterCoordinator`` (the workers and parameter
  servers only run ``tf.distribute.Server``), and the updates are asynchronous. Tried here
  (``bench/try_tf_parameter_server.py``): one custom step scheduled that way ran on loopback, but
  this trainer's per-worker synchronous loop (every worker calls ``strategy.run``, checkpoints
  resume every worker) does not map onto it, so the combination is refused.
* PyTorch + ``parameter_server``: ``torch.distributed`` has no parameter-server strategy
  (its RPC framework is a toolkit to write one, not a trainer); DDP is all-reduce.
* MXNet + ``allreduce``: the PyPI MXNet build has no collective all-reduce across machines (no
  Horovod / NCCL kvstore across hosts); its distributed training is the parameter server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from headrace.contracts import Framework, TrainRequested
from headrace.core.errors import ValidationFailed

Kind = Literal["single", "allreduce", "parameter_server"]

TF_PS_REFUSED = ("TensorFlow with strategy parameter_server is not supported: "
                 "ParameterServerStrategy runs a chief-driven asynchronous loop "
                 "(ClusterCoordinator), not this trainer's synchronous per-worker step; use "
                 "allreduce (or auto)")
TORCH_PS_REFUSED = ("PyTorch with strategy parameter_server is not supported: PyTorch trains "
                    "distributed with DistributedDataParallel (all-reduce); use allreduce (or "
                    "auto)")
MX_ALLREDUCE_REFUSED = ("MXNet with strategy allreduce is not supported: MXNet trains "
                        "distributed with parameter servers; use parameter_server (or auto)")


@dataclass(frozen=True)
class GangPlan:
    """The resolved shape of a job: ``workers`` trainers, ``servers`` parameter servers (PS
    only; a PS gang also has one scheduler)."""

    kind: Kind
    workers: int = 1
    servers: int = 0

    @property
    def distributed(self) -> bool:
        return self.kind != "single"

    @property
    def strategy(self) -> str:
        return self.kind if self.distributed else "none"

    def record(self) -> dict[str, object]:
        """What the manifest and ``jobs show`` record."""
        return {"strategy": self.strategy, "workers": self.workers, "servers": self.servers}


def plan_for(*, framework: Framework | str, strategy: str, workers: int, servers: int,
             batch_size: int | None = None) -> GangPlan:
    """Resolve ``spec.strategy`` with ``resources.workers/servers``; ValidationFailed (one line)
    for a combination that cannot run."""
    fw = Framework(framework)
    if strategy == "auto":
        if workers == 1 and servers == 0:
            return GangPlan("single")
        strategy = "parameter_server" if fw == Framework.MXNET else "allreduce"
    if fw == Framework.TENSORFLOW and strategy == "parameter_server":
        raise ValidationFailed(TF_PS_REFUSED)
    if fw == Framework.TORCH and strategy == "parameter_server":
        raise ValidationFailed(TORCH_PS_REFUSED)
    if fw == Framework.MXNET and strategy == "allreduce":
        raise ValidationFailed(MX_ALLREDUCE_REFUSED)
    if strategy == "allreduce" and servers:
        raise ValidationFailed(f"strategy allreduce takes no parameter servers (servers={servers})")
    if batch_size is not None and batch_size < workers:
        raise ValidationFailed(f"batch_size {batch_size} is smaller than the {workers} workers "
                               "it is split across")
    if strategy == "parameter_server":
        return GangPlan("parameter_server", workers, max(1, servers))
    return GangPlan("allreduce", workers, 0)


def plan_of(request: TrainRequested) -> GangPlan:
    r = request.resources
    return plan_for(framework=request.framework, strategy=request.spec.strategy,
                    workers=r.workers, servers=r.servers, batch_size=request.spec.batch_size)
