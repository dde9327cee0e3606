"""The Schema Registry a test run uses: Apicurio Registry (tools/registry.py, the Confluent-
compatible API of a real registry) started once a run, in memory, on free loopback ports.

Where Apicurio cannot be built here (no Java or Maven, or Maven cannot resolve it), tests that
need only the REST API run on tools/registry_standin.py instead, and each such run says so once;
tests that need a real registry's behaviour (compatibility checks, Kafka storage) ask for
``apicurio()`` alone and skip with the reason. ``HEADRACE_TEST_REGISTRY=apicurio`` forbids the
stand-in (those tests skip instead).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import pytest

from tools.registry import Registry, RegistryUnavailable, java_and_maven_missing
from tools.registry_standin import StandinRegistry


@dataclass(frozen=True)
class RunningRegistry:
    url: str  # the Confluent-compatible base URL
    kind: str  # "apicurio" or "standin"


_apicurio: Registry | None = None
_why_not: str | None = None
_standin: StandinRegistry | None = None


def apicurio() -> Registry:
    """The run's Apicurio Registry, started on first use; skips (saying why) where it cannot."""
    global _apicurio, _why_not
    if _apicurio is None and _why_not is None:
        _why_not = java_and_maven_missing()
        if _why_not is None:
            try:
                _apicurio = Registry().start()
            except RegistryUnavailable as exc:
                _why_not = str(exc).strip().splitlines()[-1][:300]
    if _apicurio is None:
        pytest.skip(f"Apicurio Registry unavailable: {_why_not}")
    return _apicurio


def registry() -> RunningRegistry:
    """Apicurio where it runs, else the stand-in (noted once on stderr)."""
    global _standin
    try:
        return RunningRegistry(apicurio().url, "apicurio")
    except pytest.skip.Exception:
        if os.environ.get("HEADRACE_TEST_REGISTRY", "").strip().lower() == "apicurio":
            raise
    if _standin is None:
        print(f"note: Apicurio Registry unavailable ({_why_not}); the Schema Registry tests run "
              "on tools/registry_standin.py (no compatibility checks)", file=sys.stderr)
        _standin = StandinRegistry().start()
    return RunningRegistry(_standin.url, "standin")


def stop() -> None:
    global _apicurio, _standin
    if _apicurio is not None:
        _apicurio.close()
        _apicurio = None
    if _standin is not None:
        _standin.stop()
        _standin = None
