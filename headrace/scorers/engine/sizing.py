"""How many rows a batch and a model call may hold, from bytes: payload bytes consumed, decoded
input bytes, and (on a GPU) the device's memory.

A tabular row is ~128 bytes, so ``batch_size`` rows bound everything; a 224x224x3 image is
~600 KB decoded, so 8192 of them would be 4.9 GB. The rows of a batch are capped so its decoded
inputs fit ``max_batch_bytes``, and a model call on a GPU so that its inputs and activations
(``ACTIVATION_FACTOR`` times the inputs, a conservative figure for CNNs such as ResNet-50)
fit a ``DEVICE_FRACTION`` of the device's memory, in powers of two (the buckets).
"""

from __future__ import annotations

DEFAULT_MAX_BATCH_BYTES = 64 * 1024 * 1024
DEFAULT_GPU_MEMORY_MB = 16 * 1024  # when a GPU is asked for and no figure is given
DEVICE_FRACTION = 0.5
ACTIVATION_FACTOR = 32


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def batch_rows(*, batch_size: int, row_bytes: int, max_batch_bytes: int) -> int:
    """Rows per micro-batch: ``batch_size``, fewer when the decoded rows outgrow the bytes."""
    if row_bytes <= 0:
        return batch_size
    return max(1, min(batch_size, max_batch_bytes // row_bytes))


def call_rows(*, batch_rows: int, row_bytes: int, device_memory_bytes: int | None) -> int:
    """Rows per model call: all of the batch on a CPU; on a GPU the largest power of two whose
    inputs and activations fit ``DEVICE_FRACTION`` of its memory."""
    if not device_memory_bytes or row_bytes <= 0:
        return batch_rows
    fit = int(device_memory_bytes * DEVICE_FRACTION) // (row_bytes * ACTIVATION_FACTOR)
    return max(1, min(batch_rows, _pow2_floor(fit)))


def device_memory_bytes(device: str, device_memory_mb: int | None) -> int | None:
    """The memory figure to size calls by: given, or a default when a GPU is named."""
    if device_memory_mb:
        return device_memory_mb * 1024 * 1024
    if device.startswith("gpu"):
        return DEFAULT_GPU_MEMORY_MB * 1024 * 1024
    return None
