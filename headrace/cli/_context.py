"""What the root command hands to subcommands: settings read once, plus the Kafka to use."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import typer

from headrace.core.settings import Settings, load_settings
from headrace.streams.broker import discover
from headrace.streams.clients import KafkaConnection, check_reachable
from headrace.streams.connection import connection_for, kafka


@dataclass
class CliContext:
    bootstrap: str | None = None
    dfs_root: Path | None = None
    _settings: Settings | None = field(default=None, repr=False)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            s = load_settings(bootstrap=self.bootstrap, dfs_root=self.dfs_root)
            if not s.bootstrap:
                # A `headrace broker` running on this machine is the next best default.
                found = discover()
                if found:
                    s = s.with_overrides(bootstrap=found)
            self._settings = s
        return self._settings


def settings(ctx: typer.Context) -> Settings:
    obj = ctx.find_object(CliContext)
    return obj.settings if obj is not None else load_settings()


def connection(ctx: typer.Context) -> KafkaConnection:
    """The configured cluster, checked reachable. Commands that need data need a real cluster."""
    s = settings(ctx)
    if not s.bootstrap:
        raise typer.BadParameter(
            "no Kafka configured: set HEADRACE_BOOTSTRAP or --bootstrap, "
            "or start one with `headrace broker`", param_hint="--bootstrap")
    conn = connection_for(s)
    check_reachable(conn)
    return conn


@contextmanager
def connection_or_embedded(ctx: typer.Context) -> Iterator[KafkaConnection]:
    """The configured cluster, or an embedded broker for the duration of the command."""
    with kafka(settings(ctx)) as conn:
        check_reachable(conn)
        yield conn
