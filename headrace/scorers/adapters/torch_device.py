"""The torch device a scorer's ``--device`` names (``auto``, ``cpu``, ``gpu:N``): one reading for
the torch adapter and Keras-on-torch."""

from __future__ import annotations

import torch

from headrace.core.errors import ConfigError


def torch_device(device: str) -> torch.device:
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "cpu" or (device == "auto" and gpus == 0):
        return torch.device("cpu")
    index = 0 if device == "auto" else int(device.split(":", 1)[1])
    if index >= gpus:
        raise ConfigError(f"device {device} requested but torch sees {gpus} GPU(s)")
    return torch.device("cuda", index)
