"""MXNet: ``build(spec, inputs) -> gluon.HybridBlock`` giving raw scores (logits)."""

from __future__ import annotations

from typing import Any

from mxnet import gluon

from . import config


class ResidualMLP(gluon.HybridBlock):
    def __init__(self, width: int, outputs: int) -> None:
        super().__init__()
        with self.name_scope():
            self.norm = gluon.nn.BatchNorm()  # learns the input scale inside the graph
            self.inp = gluon.nn.Dense(width, activation="relu")
            self.hidden = gluon.nn.Dense(width, activation="relu")
            self.out = gluon.nn.Dense(outputs)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        x = self.inp(self.norm(x))
        return self.out(x + self.hidden(x))


def build(spec: Any, inputs: Any) -> gluon.HybridBlock:
    return ResidualMLP(int(spec.hyperparameters.get("width", config.WIDTH)), spec.n_outputs)
