"""The scorer's prediction formats (``HEADRACE_SCORER_OUTPUT_FORMAT``), one entry each.

The scoring core always builds JSON predictions for JSON inputs (Arrow inputs get Arrow
predictions, unchanged by this setting); a format turns those into what the predictions topic
carries, with its headers. ``json`` (the default) passes them through; ``avro`` writes them as
Avro in the Schema Registry wire format (``avro_predictions``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from headrace.core.errors import ConfigError
from headrace.scorers.wire.encoding import JSON_HEADERS
from headrace.streams.schema_registry import SchemaRegistry


class PredictionFormat(Protocol):
    name: str
    headers: list[tuple[str, bytes]]

    def encode(self, values: list[bytes]) -> list[bytes]: ...


@dataclass(frozen=True)
class FormatContext:
    predictions_topic: str
    registry: SchemaRegistry | None


class JsonPredictions:
    name = "json"
    headers = JSON_HEADERS

    def encode(self, values: list[bytes]) -> list[bytes]:
        return values


def _json(_: FormatContext) -> PredictionFormat:
    return JsonPredictions()


def _avro(ctx: FormatContext) -> PredictionFormat:
    if ctx.registry is None:
        raise ConfigError("output format avro needs a schema registry "
                          "(HEADRACE_SCHEMA_REGISTRY_URL)")
    from headrace.scorers.wire.avro_predictions import AvroPredictions  # fastavro: only here

    return AvroPredictions(ctx.registry, ctx.predictions_topic)


FORMATS: dict[str, Callable[[FormatContext], PredictionFormat]] = {"json": _json, "avro": _avro}


def build_format(name: str, ctx: FormatContext) -> PredictionFormat:
    """The named format; ``ConfigError`` for an unknown one or a missing registry."""
    try:
        make = FORMATS[name]
    except KeyError:
        raise ConfigError(f"unknown output format {name!r}: one of {', '.join(FORMATS)}"
                          ) from None
    return make(ctx)
