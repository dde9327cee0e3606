"""Framework backends behind one interface (:mod:`.base`); imported lazily by framework."""

from __future__ import annotations

import importlib

from headrace.contracts import Framework
from headrace.core.errors import ValidationFailed
from headrace.core.llvm_guard import before_torch, load_in_safe_order
from headrace.trainers.backends.base import Backend, DistributedRuntime
from headrace.trainers.distributed.peers import GangMember

load_in_safe_order()  # before any framework module of this package: see core.llvm_guard

_MODULES = {Framework.TENSORFLOW: "tensorflow_keras", Framework.MXNET: "mxnet_gluon",
            Framework.TORCH: "torch_nn",
            Framework.ONNX: "onnx_imported"}  # evaluation only: imported, never trained


def get_backend(framework: Framework | str) -> Backend:
    """The backend for ``framework``; its framework is imported only now."""
    try:
        fw = Framework(framework)
    except ValueError:
        raise ValidationFailed(f"unknown framework {framework!r}: use "
                               f"{' or '.join(f.value for f in Framework)}") from None
    if fw == Framework.TORCH:
        before_torch()
    module = importlib.import_module(f"headrace.trainers.backends.{_MODULES[fw]}")
    backend: Backend = module.BACKEND
    return backend


def distributed_runtime(member: GangMember, framework: Framework | str = Framework.TENSORFLOW
                        ) -> DistributedRuntime | None:
    """The worker's distributed runtime (all-reduce or parameter servers), or None for a
    single-process job; the framework is imported only now."""
    if not member.distributed:
        return None
    runtime: DistributedRuntime
    if Framework(framework) == Framework.TORCH:
        before_torch()
        from headrace.trainers.backends import torch_ddp

        runtime = torch_ddp.DataParallelRuntime(member)
        return runtime
    name = "tf_allreduce" if member.strategy == "allreduce" else "mxnet_ps"
    module = importlib.import_module(f"headrace.trainers.backends.{name}")
    runtime = (module.AllReduceRuntime(member) if name == "tf_allreduce"
               else module.ParameterServerRuntime(member))
    return runtime


def serve_parameter_server() -> None:
    """Become the ``DMLC_ROLE`` scheduler or server: MXNet runs it on import, then exits."""
    importlib.import_module("headrace.trainers.backends.mxnet_ps")
