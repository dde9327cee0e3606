"""PyTorch: ``build(spec, inputs) -> torch.nn.Module`` giving raw scores (logits)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from . import config


class ResidualMLP(nn.Module):
    def __init__(self, features: int, width: int, outputs: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(features)  # learns the input scale inside the graph
        self.inp = nn.Sequential(nn.Linear(features, width), nn.ReLU())
        self.hidden = nn.Sequential(nn.Linear(width, width), nn.ReLU())
        self.out = nn.Linear(width, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(self.norm(x))
        return self.out(x + self.hidden(x))


def build(spec: Any, inputs: Any) -> nn.Module:
    (features,) = inputs  # a tabular dataset: one numeric input of shape (n_features,)
    return ResidualMLP(features.shape[0], int(spec.hyperparameters.get("width", config.WIDTH)),
                       spec.n_outputs)
