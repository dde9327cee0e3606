"""Scorer settings: frozen, validated, read once at the entrypoint (env prefix HEADRACE_SCORER_)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from headrace.core.errors import ConfigError
from headrace.core.naming import check_name
from headrace.core.validation import first_error

_DEVICE_RE = re.compile(r"^(auto|cpu|gpu:\d{1,2})$")


class DriftSettings(BaseSettings):
    """The scorer's drift tap (env prefix HEADRACE_DRIFT_, as the chart's ``scorer.drift`` sets
    them). The window size and false-alarm rate are calibrated into each version's profile at
    training time (``drift_window``, ``drift_false_alarm_rate``); these two settings state what
    the operator expects, and a version calibrated otherwise keeps its own (logged)."""

    model_config = SettingsConfigDict(env_prefix="HEADRACE_DRIFT_", frozen=True, extra="forbid")

    enabled: bool = Field(
        default=True,
        description="Track drift against the served version's drift_profile.json (a version "
                    "without one is not tracked).")
    window_records: int | None = Field(
        default=None, ge=1, le=1_000_000,
        description="Expected records per window; the profile's calibrated window is used.")
    window_seconds: float = Field(
        default=3600.0, gt=0, le=30 * 86400,
        description="A window also closes this long after it opened; a window closed short of "
                    "its records is reported but never alarms.")
    false_alarm_rate: float | None = Field(
        default=None, gt=0, lt=0.5,
        description="Expected per-window false-alarm rate; the profile's calibration is used.")
    rows_per_batch: int = Field(
        default=1024, ge=1, le=1_000_000,
        description="Most rows of a batch counted into the window (an evenly spaced sample of "
                    "bigger batches): bounds the tap's cost at high throughput.")


class ScorerSettings(BaseSettings):
    """How one scorer process consumes, batches, scores and reports."""

    model_config = SettingsConfigDict(env_prefix="HEADRACE_SCORER_", frozen=True, extra="forbid")

    stream: str = Field(default="demo", description="Stream to score: data.<stream>.")
    model: str | None = Field(default=None, description="Model name; default: the stream name.")
    alias: str = Field(default="production", description="Alias of the model version to follow.")
    batch_size: int = Field(default=8192, ge=1, le=1_000_000,
                            description="Most rows per micro-batch (and per model call).")
    max_wait_ms: int = Field(default=10, ge=0, le=60_000,
                             description="Longest wait to fill a micro-batch after its first row.")
    http_port: int = Field(default=8080, ge=0, le=65535, description="Probes + metrics; 0: any.")
    http_host: str = "0.0.0.0"
    grace_s: float = Field(default=20.0, gt=0, le=3600,
                           description="SIGTERM: finish, commit and exit within this many seconds.")
    device: str = Field(default="auto", description='"auto", "cpu" or "gpu:N".')
    runtime: Literal["tensorflow", "jax", "torch", "onnxruntime"] = Field(
        default="tensorflow",
        description="What runs models: TensorFlow (the default: each model on its own "
                    "framework), Keras 3 on JAX or PyTorch, or ONNX Runtime on the version's "
                    "ONNX export (headrace models export). Chosen once per process, before "
                    "Keras is imported.")
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        default="fp32",
        description="Torch models only: bf16 or fp16 (a GPU only) runs them under autocast; "
                    "a sample of live calls is also run in fp32 and the share of equal labels "
                    "exported (headrace_scorer_precision_agreement). Other models refuse "
                    "anything but fp32.")
    decode_processes: int = Field(
        default=1, ge=0, le=64,
        description="Helper processes that decode big JSON batches while the previous batch is "
                    "scored; 0: decode in the scoring thread.")
    top_k: int | None = Field(
        default=None, ge=0, le=1000,
        description="Labels with scores in each prediction of a classifier with a signature; "
                    "default: 5 when it has more than 10 classes, else none; 0: none.")
    max_batch_bytes: int = Field(
        default=64 * 1024 * 1024, ge=1024, le=1 << 40,
        description="Most decoded bytes per micro-batch (an Arrow message costs its decoded "
                    "size, from its metadata; a batch closes early before the message that "
                    "would go over; rows of big inputs such as images are capped to fit).")
    device_memory_mb: int | None = Field(
        default=None, ge=1, le=1 << 24,
        description="Device memory to size model calls by (default on gpu:N: 16384; cpu: "
                    "unbounded).")
    max_message_rows: int = Field(
        default=1 << 20, ge=1, le=1 << 32,
        description="An Arrow message holding more rows is dead-lettered before reading.")
    max_message_bytes: int = Field(
        default=64 * 1024 * 1024, ge=1024, le=1 << 40,
        description="An Arrow message whose decoded size (from its metadata: bools widened to "
                    "bytes, columns cast to the model's input dtype) is over this is "
                    "dead-lettered before reading.")
    message_max_bytes: int = Field(
        default=8 * 1024 * 1024, ge=4096, le=1 << 30,
        description="The prediction producer's message.max.bytes: an input's Arrow predictions "
                    "over it are split into parts; a single prediction over it dead-letters "
                    "its input. Keep it at or under the predictions topic's max.message.bytes.")
    max_arrow_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1024, le=1 << 40,
        description="An Arrow message decompressing to more is dead-lettered before reading.")
    max_image_pixels: int = Field(
        default=40_000_000, ge=1, le=1 << 34,
        description="An image with more pixels is dead-lettered before decoding.")
    output_format: Literal["json", "avro"] = Field(
        default="json",
        description="What JSON inputs' predictions are written as: JSON, or Avro in the Schema "
                    "Registry wire format (needs HEADRACE_SCHEMA_REGISTRY_URL; the schema is "
                    "registered under predictions.<stream>-value). Arrow inputs keep Arrow.")
    transactional: bool = False
    idempotent: bool = Field(
        default=True,
        description="Idempotent prediction producer. Off: order kept by one request in flight, "
                    "retries may duplicate (detectable by source offset); ~3x the throughput on "
                    "the embedded broker. Transactions always use it.")
    transactional_id: str | None = None
    partitions: Annotated[tuple[int, ...], NoDecode] = Field(
        default=(), description='Static partition ownership, e.g. "0,3,5"; empty: consumer group.')
    model_poll_s: float = Field(default=10.0, gt=0, le=3600,
                                description="Fallback: re-read the alias pointer this often.")
    liveness_s: float = Field(default=30.0, gt=0, le=3600,
                              description="/livez fails when the poll loop is stuck this long.")
    stall_s: float = Field(
        default=120.0, gt=0, le=86400,
        description="/livez and /readyz fail when the scorer holds partitions with unconsumed "
                    "records (high watermark > position) and has consumed nothing this long.")
    lag_check_s: float = Field(
        default=5.0, gt=0, le=3600,
        description="How often the broker's high watermarks are read for the stall check "
                    "(off the scoring loop).")
    model_timeout_s: float = Field(default=60.0, gt=0, le=3600,
                                   description="Wait for a first model this long before retrying.")
    drift: DriftSettings = Field(
        default_factory=lambda: DriftSettings(),
        description="Live drift tracking (HEADRACE_DRIFT_*; docs/drift.md).")

    shadow_budget_ms: float = Field(
        default=5.0, ge=0.0, le=60_000,
        description="A shadow candidate may delay a batch's production predictions by at most "
                    "this many milliseconds plus shadow_budget_share of the time production "
                    "took to score the batch; a candidate over it is dropped for the batch.")
    shadow_budget_share: float = Field(
        default=1.0, ge=0.0, le=100.0,
        description="The share of production's scoring time a shadow candidate may add to a "
                    "batch (on top of shadow_budget_ms).")
    label_window_records: int = Field(
        default=100_000, ge=1, le=100_000_000,
        description="Predictions (and early labels) kept waiting for their label "
                    "(labels.<stream>); the oldest goes first.")
    label_window_s: float = Field(
        default=3600.0, gt=0, le=30 * 24 * 3600,
        description="A prediction and its label join only within this many seconds.")

    @field_validator("stream")
    @classmethod
    def _stream(cls, value: str) -> str:
        return check_name(value, what="stream name")

    @field_validator("model")
    @classmethod
    def _model(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value, what="model name")

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        value = value.strip().lower()
        if not _DEVICE_RE.fullmatch(value):
            raise ValueError('device must be "auto", "cpu" or "gpu:N"')
        return value

    @field_validator("partitions", mode="before")
    @classmethod
    def _partitions(cls, value: Any) -> Any:
        if value is None:
            return ()
        if isinstance(value, int):
            value = [value]
        if isinstance(value, str):
            value = [p.strip() for p in value.split(",") if p.strip()]
        try:
            parts = tuple(sorted({int(p) for p in value}))
        except (TypeError, ValueError):
            raise ValueError('partitions must be numbers, e.g. "0,3,5"') from None
        if any(p < 0 for p in parts):
            raise ValueError("partitions must be >= 0")
        return parts

    @property
    def model_name(self) -> str:
        return self.model or self.stream


def load_scorer_settings(**overrides: Any) -> ScorerSettings:
    """Read the environment once, apply non-None overrides, validate; raise ``ConfigError``."""
    try:
        return ScorerSettings(**{k: v for k, v in overrides.items() if v is not None})
    except (ValidationError, ValueError) as exc:
        if isinstance(exc, ValidationError):
            raise ConfigError(f"invalid scorer settings: {first_error(exc, root='settings')}"
                              ) from None
        raise ConfigError(f"invalid scorer settings: {exc}") from None
