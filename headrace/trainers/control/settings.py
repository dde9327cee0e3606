"""Control-plane settings: the executor, the Kubernetes objects it creates, the probes.

Read once at the entrypoint (``headrace control``, ``headrace schedule fire``) from the
environment, prefix ``HEADRACE_``; the Helm chart sets exactly these variables (a chart test
renders it and compares both lists).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from headrace.core.errors import ConfigError

_ENV_NAME = re.compile(r"^HEADRACE_[A-Z0-9_]{1,64}$")


class ControlSettings(BaseSettings):
    """How the control plane runs jobs (``executor``) and what a Kubernetes Job gets."""

    model_config = SettingsConfigDict(env_prefix="HEADRACE_", frozen=True, extra="forbid")

    executor: Literal["local", "kubernetes"] = Field(
        default="local",
        description="local: jobs are subprocesses of the control plane; kubernetes: one Job each "
                    "(the control plane never trains in its own process).")
    triggers: Path | None = Field(default=None,
                                  description="Schedules and event rules (YAML).")
    control_http_port: int = Field(
        default=0, ge=0, le=65535,
        description="/livez and /readyz; 0: any free port (logged). The chart sets 8081.")
    control_http_host: str = "0.0.0.0"
    control_liveness_s: float = Field(
        default=60.0, gt=0, le=3600,
        description="/livez fails when the control loop has not ticked this long, or the Kafka "
                    "consumer has had no group session this long.")
    control_rebuild_table: bool = Field(
        default=False,
        description="At start, delete the tables' changelogs and re-derive the job table from "
                    "the DFS (after the broker lost its data; `headrace control "
                    "--rebuild-table`).")
    control_recovery_deadline_s: float = Field(
        default=120.0, gt=0, le=86_400,
        description="A table recovery not done by then is diagnosed: one that cannot end "
                    "(a changelog with records nobody can read) stops the process with one "
                    "line saying how to rebuild.")
    control_watchdog_s: float | None = Field(
        default=600.0, gt=0, le=86_400,
        description="A running job one of whose gang members stepped and then made no "
                    "training step (heartbeat) this long is hung: its gang is restarted from "
                    "the last checkpoint (or failed once its attempts are spent).")
    control_startup_s: float | None = Field(
        default=1800.0, gt=0, le=86_400,
        description="A launched job none of whose members made a first training step this "
                    "long (start-up deadline: a member frozen or stuck before training) is "
                    "restarted from its last checkpoint, like a hung one.")
    k8s_namespace: str = Field(default="headrace", description="Where training Jobs go.")
    k8s_image: str | None = Field(default=None, description="The trainer image (required).")
    k8s_gpu_image: str | None = Field(
        default=None, description="The CUDA trainer image for pods that request GPUs "
                                  "(unset: the trainer image everywhere).")
    k8s_dfs_claim: str = Field(default="headrace-dfs", description="The RWX DFS claim.")
    k8s_kafka_secret: str | None = Field(
        default="headrace-kafka",
        description="Secret with `bootstrap`, `config` (and `password`) for the trainer pods.")
    k8s_kafka_ca_secret: str | None = Field(
        default=None, description="Secret with the Kafka CA (`ca.crt`), mounted in trainer pods.")
    k8s_kafka_client_cert_secret: str | None = Field(
        default=None, description="mTLS: Secret with `user.crt` and `user.key`, mounted in "
                                  "trainer pods at /etc/headrace/kafka-client.")
    k8s_service_account: str = Field(
        default="headrace-trainer", description="Trainer pods' ServiceAccount (no API token).")
    k8s_gang: Literal["none", "volcano", "kueue"] = "none"
    k8s_queue: str | None = Field(default=None, description="Volcano queue or Kueue LocalQueue.")
    k8s_gpu_type: str | None = Field(default=None,
                                     description="Node label value GPU training pods require.")
    k8s_max_retries: int = Field(default=3, ge=0, le=100)
    k8s_trainer_env: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="Extra HEADRACE_* variables for trainer pods as JSON (the operator caps).")

    @field_validator("k8s_trainer_env", mode="before")
    @classmethod
    def _trainer_env(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = json.loads(value) if value.strip() else {}
        if not isinstance(value, dict):
            raise ValueError("k8s_trainer_env must be a JSON object")
        for name in value:
            if not _ENV_NAME.fullmatch(str(name)):
                raise ValueError(f"k8s_trainer_env: {name!r} is not a HEADRACE_* variable")
        return {str(k): str(v) for k, v in value.items()}

    @field_validator("k8s_image", "k8s_gpu_image", "k8s_kafka_secret", "k8s_kafka_ca_secret",
                     "k8s_kafka_client_cert_secret", "k8s_queue", "k8s_gpu_type", "triggers",
                     mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        # Helm renders an unset value as "": treat it as not given.
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _kubernetes_needs_an_image(self) -> ControlSettings:
        if self.executor == "kubernetes" and not self.k8s_image:
            raise ValueError("HEADRACE_K8S_IMAGE is not set (the trainer image, required with "
                             "HEADRACE_EXECUTOR=kubernetes)")
        if self.k8s_gang == "kueue" and not self.k8s_queue:
            # Without a queue label Kueue never admits the Job: it would stay suspended.
            raise ValueError("HEADRACE_K8S_QUEUE is not set (the Kueue LocalQueue, required "
                             "with HEADRACE_K8S_GANG=kueue)")
        return self


def load_control_settings(**overrides: Any) -> ControlSettings:
    """Read the environment once, apply non-None overrides, validate; raise ``ConfigError``."""
    try:
        return ControlSettings(**{k: v for k, v in overrides.items() if v is not None})
    except (ValidationError, json.JSONDecodeError) as exc:
        if isinstance(exc, json.JSONDecodeError):
            raise ConfigError(f"invalid control-plane settings: {exc}") from None
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        where = f"HEADRACE_{loc.upper()}: " if loc else ""
        raise ConfigError(f"invalid control-plane settings: {where}{msg}") from None
