"""The event base: versioned, validated pydantic models for every control-plane message.

Each message is JSON with a ``content-type`` and ``schema``/``schema-version`` header, so a
consumer can reject or dead-letter what it does not understand without guessing.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from headrace.core.bounded_json import check_bounds
from headrace.core.errors import ValidationFailed
from headrace.core.validation import first_error

MAX_EVENT_BYTES = 1_000_000


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_id() -> str:
    return uuid.uuid4().hex


class Contract(BaseModel):
    """Base of every event: frozen, strict about unknown fields, versioned."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    SCHEMA: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1

    schema_version: int = Field(default=1, ge=1)

    def to_bytes(self) -> bytes:
        return self.model_dump_json().encode()

C = TypeVar("C", bound=Contract)


def parse(model: type[C], data: bytes | str | dict[str, Any]) -> C:
    """Validate ``data`` against ``model``; raise ``ValidationFailed`` with one clear line."""
    if isinstance(data, bytes | str) and len(data) > MAX_EVENT_BYTES:
        raise ValidationFailed(f"{model.__name__}: event of {len(data)} bytes exceeds the limit")
    if isinstance(data, bytes | str):  # the same depth bound as every other Kafka reader
        try:
            check_bounds(data.encode("utf-8", "surrogatepass") if isinstance(data, str)
                         else data, max_bytes=MAX_EVENT_BYTES)
        except ValidationFailed as exc:
            raise ValidationFailed(f"{model.__name__}: {exc}") from None
    try:
        if isinstance(data, dict):
            obj = model.model_validate(data)
        else:
            obj = model.model_validate_json(data)
    except ValidationError as exc:
        raise ValidationFailed(
            f"{model.__name__}: {describe_validation_error(exc)}", details=exc.errors()
        ) from None
    if obj.schema_version > model.VERSION:
        raise ValidationFailed(
            f"{model.__name__}: schema_version {obj.schema_version} is newer than {model.VERSION}"
        )
    return obj


def describe_validation_error(exc: ValidationError) -> str:
    return first_error(exc, root="payload", count_more=True)
