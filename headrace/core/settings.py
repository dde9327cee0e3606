"""Settings, read once at the entrypoint into a frozen, validated object.

Every value can come from the environment (prefix ``HEADRACE_``) or be overridden by the CLI.
Nothing below the entrypoint reads the environment.
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Annotated, Any

import platformdirs
from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from headrace.core.errors import ConfigError
from headrace.core.naming import check_name
from headrace.core.validation import first_error


def default_dfs_root() -> Path:
    return platformdirs.user_data_path("headrace") / "dfs"


class Settings(BaseSettings):
    """Process-wide settings shared by every role."""

    model_config = SettingsConfigDict(env_prefix="HEADRACE_", frozen=True, extra="forbid")

    bootstrap: str | None = Field(
        default=None,
        description="Kafka bootstrap servers; unset means start the embedded broker.",
    )
    kafka_config: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="Extra librdkafka settings (security.protocol, sasl.*, ssl.*) as JSON.",
    )
    dfs_root: Path = Field(default_factory=default_dfs_root)
    streams: Annotated[tuple[str, ...], NoDecode] = ("demo",)
    partitions: int = Field(default=3, ge=1, le=10_000)
    replication_factor: int = Field(default=1, ge=1, le=7)
    min_insync_replicas: int | None = Field(
        default=None, ge=1, le=7,
        description="min.insync.replicas of the topics Headrace creates; unset: the broker's.")
    kafka_password_file: Path | None = Field(
        default=None,
        description="File holding the SASL password (a mounted Secret); read once at start-up "
                    "into sasl.password, so the password is never in an env var.")
    schema_registry_url: str | None = Field(
        default=None,
        description="Base URL of a Confluent-compatible Schema Registry (Apicurio's "
                    "http://HOST:PORT/apis/ccompat/v7); unset: no wire-format records.")
    schema_registry_auth_file: Path | None = Field(
        default=None,
        description="File holding the registry's basic auth as one line user:password (a "
                    "mounted Secret); read once at start-up, never logged.")
    schema_registry_ca_file: Path | None = Field(
        default=None, description="PEM CA bundle to verify an https registry.")
    request_timeout_s: float = Field(default=10.0, gt=0, le=600)
    client_rack: str | None = None
    embedded_port: int = Field(default=0, ge=0, le=65535)
    topic_prefix: str = Field(
        default="",
        description="Namespace of the control plane's topics (PREFIX.events.*) and of its "
                    "consumer group, so several control planes share one cluster; empty: none.")
    # Operator caps on training requests: the control plane, `headrace train` and the trainer
    # refuse a request over one, naming it (headrace.trainers.limits).
    max_layers: int = Field(default=32, ge=1, le=100_000,
                            description="Most hidden layers a request may ask for.")
    max_parameters: int = Field(default=100_000_000, ge=1,
                                description="Most trainable parameters of a built model.")
    max_epochs: int = Field(default=1000, ge=1, le=10_000)
    max_gpus: int = Field(default=8, ge=0, le=16_384,
                          description="Most GPUs of one job's whole gang (workers + servers).")
    max_workers: int = Field(default=16, ge=1, le=256)
    max_servers: int = Field(default=8, ge=0, le=64, description="Most parameter servers.")
    max_cpu: float = Field(default=64.0, gt=0, le=1024, description="Most CPUs of one pod.")
    max_memory_gib: float = Field(default=256.0, gt=0, le=4096,
                                  description="Most memory (GiB) of one pod.")
    max_dataset_bytes: int = Field(default=16 * 1024**3, ge=1,
                                   description="Largest dataset (its files' total size).")

    @model_validator(mode="before")
    @classmethod
    def _read_password_file(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not data.get("kafka_password_file"):
            return data
        path = Path(str(data["kafka_password_file"]))
        try:
            password = path.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise ValueError(f"kafka_password_file {path}: {exc.strerror or exc}") from None
        if not password:
            raise ValueError(f"kafka_password_file {path} is empty")
        config = _kafka_config_dict(data.get("kafka_config") or {})
        return {**data, "kafka_config": {**config, "sasl.password": password}}

    @model_validator(mode="after")
    def _insync_within_replication(self) -> Settings:
        if self.min_insync_replicas and self.min_insync_replicas > self.replication_factor:
            raise ValueError(f"min_insync_replicas ({self.min_insync_replicas}) exceeds "
                             f"replication_factor ({self.replication_factor})")
        return self

    def topic_config(self) -> dict[str, str]:
        """Broker-side config every topic Headrace creates gets (durability settings)."""
        if self.min_insync_replicas is None:
            return {}
        return {"min.insync.replicas": str(self.min_insync_replicas)}

    @field_validator("streams", mode="before")
    @classmethod
    def _split_streams(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [s.strip() for s in value.split(",") if s.strip()]
        return tuple(check_name(s, what="stream name") for s in value)

    @field_validator("topic_prefix", mode="after")
    @classmethod
    def _safe_prefix(cls, value: str) -> str:
        return check_name(value, what="topic prefix") if value else value

    @field_validator("kafka_config", mode="before")
    @classmethod
    def _parse_kafka_config(cls, value: Any) -> Any:
        return _kafka_config_dict(value)

    @field_validator("schema_registry_url", mode="after")
    @classmethod
    def _registry_url(cls, value: str | None) -> str | None:
        if not value:
            return None
        return check_registry_url(value)

    @field_validator("dfs_root", mode="after")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        return value.expanduser().absolute()

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with the non-None overrides applied, validated again."""
        data = self.model_dump()
        data.update({k: v for k, v in overrides.items() if v is not None})
        return load_settings(**data)


def check_registry_url(url: str) -> str:
    """The base URL without a trailing slash; ``ValueError`` for anything but http(s)://host."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"schema registry URL must be http(s)://HOST[:PORT][/PATH], got {url!r}")
    if parts.username is not None or parts.password is not None:
        raise ValueError("schema registry URL must not hold credentials: "
                         "put user:password in the schema_registry_auth_file")
    if parts.query or parts.fragment:
        raise ValueError("schema registry URL must not have a query or fragment")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise ValueError(f"schema registry URL: {exc}") from None
    return url.strip().rstrip("/")


def _kafka_config_dict(value: Any) -> dict[str, str]:
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else {}
    if not isinstance(value, dict):
        raise ValueError("kafka_config must be a JSON object")
    return {str(k): str(v) for k, v in value.items()}


def load_settings(**overrides: Any) -> Settings:
    """Read the environment once, apply overrides, and validate; raise ``ConfigError``."""
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except (ValidationError, json.JSONDecodeError, ValueError) as exc:
        raise ConfigError(f"invalid settings: {_first_error(exc)}") from None


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return first_error(exc, root="settings")
    return str(exc)
