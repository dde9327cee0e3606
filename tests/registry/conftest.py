"""Fixtures of the Schema Registry tests (tests/real_registry.py starts the registry)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from headrace.streams.schema_registry import RegistryConfig, SchemaRegistry
from tests import real_registry


@pytest.fixture(scope="session")
def schema_registry() -> Iterator[real_registry.RunningRegistry]:
    """The run's registry (Apicurio, else the stand-in): its URL and kind."""
    yield real_registry.registry()


@pytest.fixture
def registry_client(schema_registry: real_registry.RunningRegistry) -> SchemaRegistry:
    return SchemaRegistry(RegistryConfig(url=schema_registry.url, timeout_s=5.0))
