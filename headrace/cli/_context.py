"""What the root command hands to subcommands: settings read once, plus the Kafka to use.

Two kinds of command find Kafka differently:

* short client commands (``send``, ``tail``, ``topics``, ``train``, ``jobs``, ...) use the
  configured cluster, else a running ``headrace broker`` found through the broker state file,
  and say so in one line on stderr;
* long-running commands (``demo``, ``up``, ``control``, ``score``, ``dashboard``) never attach
  to a discovered broker: they use what the user named (``--bootstrap``/``HEADRACE_BOOTSTRAP``)
  or start their own, and print first which broker and which DFS they use and why.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

from headrace.core.errors import ConfigError
from headrace.core.settings import Settings, load_settings
from headrace.streams.broker import Discovered, find_running
from headrace.streams.clients import KafkaConnection, check_reachable
from headrace.streams.connection import connection_for, kafka
from headrace.streams.topics import ControlTopics


@dataclass
class CliContext:
    bootstrap: str | None = None
    dfs_root: Path | None = None
    _base: Settings | None = field(default=None, repr=False)
    _client: Settings | None = field(default=None, repr=False)

    @property
    def base(self) -> Settings:
        """Flags and environment only: no discovery."""
        if self._base is None:
            self._base = load_settings(bootstrap=self.bootstrap, dfs_root=self.dfs_root)
        return self._base

    @property
    def settings(self) -> Settings:
        """For short client commands: a running ``headrace broker`` is the next best default."""
        if self._client is None:
            s = self.base
            if not s.bootstrap:
                found = find_running()
                if found:
                    print(f"headrace: using the broker at {found.bootstrap}, {found.describe()}",
                          file=sys.stderr)
                    s = s.with_overrides(bootstrap=found.bootstrap)
            self._client = s
        return self._client

    def broker_source(self) -> str | None:
        """Where an explicitly named broker came from, or None."""
        if self.bootstrap:
            return "--bootstrap"
        if os.environ.get("HEADRACE_BOOTSTRAP"):
            return "HEADRACE_BOOTSTRAP"
        return None

    def dfs_source(self) -> str | None:
        """Where an explicitly named DFS root came from, or None (the default)."""
        if self.dfs_root is not None:
            return "--dfs-root"
        if os.environ.get("HEADRACE_DFS_ROOT"):
            return "HEADRACE_DFS_ROOT"
        return None


def _root(ctx: typer.Context) -> CliContext:
    return ctx.find_object(CliContext) or CliContext()


def settings(ctx: typer.Context) -> Settings:
    """For short client commands: may use (and name) a discovered ``headrace broker``."""
    return _root(ctx).settings


def base_settings(ctx: typer.Context) -> Settings:
    """Flags and environment only, for commands that do not talk to Kafka."""
    return _root(ctx).base


PrefixOpt = Annotated[str, typer.Option("--topic-prefix", hidden=True,
                                        help="Namespace for the control-plane topics.")]


def control_topics(ctx: typer.Context, flag: str = "") -> ControlTopics:
    """The control topics every command uses: the hidden ``--topic-prefix`` if given, else
    HEADRACE_TOPIC_PREFIX's. The one place a command names its control-plane namespace."""
    return ControlTopics.with_prefix(flag or base_settings(ctx).topic_prefix)


@dataclass(frozen=True)
class Where:
    """The broker and DFS a long-running command uses, and how it found them."""

    settings: Settings
    broker_line: str
    dfs_line: str
    ignored: Discovered | None = None
    dfs_named: bool = False

    def lines(self) -> list[str]:
        out = [self.broker_line, self.dfs_line]
        if self.ignored is not None:
            out.append(f"note: not using the broker at {self.ignored.bootstrap} "
                       f"({self.ignored.describe()}); add `--bootstrap "
                       f"{self.ignored.bootstrap}` before the command to use it")
        return out


def service(ctx: typer.Context, command: str, *, own_broker: bool,
            scratch_dfs: bool = False, no_broker: str | None = None) -> Where:
    """Settings for a long-running command; see ``where``."""
    return where(_root(ctx), command, own_broker=own_broker, scratch_dfs=scratch_dfs,
                 no_broker=no_broker)


def where(root: CliContext, command: str, *, own_broker: bool, scratch_dfs: bool = False,
          no_broker: str | None = None) -> Where:
    """Settings for a long-running command, which never attaches to a discovered broker.

    ``own_broker``: without a named one, the command starts its own (demo, up). Otherwise
    (control, score) a discovered broker is refused with the flag that names it, since a
    private broker nobody else can reach is never what the user meant then.
    ``scratch_dfs``: without a named DFS root the command uses a temporary one (demo).
    ``no_broker``: what the command does without a named broker, if not starting one.
    """
    s = root.base
    found = find_running() if not s.bootstrap else None
    source = root.broker_source()
    if s.bootstrap:
        broker_line = f"broker: {s.bootstrap} (from {source})"
    elif found is not None and not own_broker:
        raise ConfigError(
            f"`headrace {command}` runs until stopped, so it does not attach to a broker it "
            f"discovered: {found.describe()} listens on {found.bootstrap}; name it with "
            f"`headrace --bootstrap {found.bootstrap} {command} ...` or "
            f"`export HEADRACE_BOOTSTRAP={found.bootstrap}`")
    elif no_broker is not None:
        broker_line = f"broker: none ({no_broker})"
    else:
        broker_line = ("broker: an embedded one started by this command (no --bootstrap or "
                       "HEADRACE_BOOTSTRAP given; memory only)")
    dfs_from = root.dfs_source()
    if dfs_from:
        dfs_line = f"DFS: {s.dfs_root} (from {dfs_from})"
    elif scratch_dfs:
        dfs_line = ("DFS: a scratch directory, removed at the end (no --dfs-root or "
                    "HEADRACE_DFS_ROOT given)")
    else:
        dfs_line = f"DFS: {s.dfs_root} (the default; --dfs-root or HEADRACE_DFS_ROOT changes it)"
    return Where(s, broker_line, dfs_line, found if own_broker else None, bool(dfs_from))


def connection(ctx: typer.Context) -> KafkaConnection:
    """The configured cluster, checked reachable. Commands that need data need a real cluster."""
    s = settings(ctx)
    if not s.bootstrap:
        raise typer.BadParameter(
            "no Kafka configured: set HEADRACE_BOOTSTRAP or --bootstrap, "
            "or start one with `headrace broker` (or `headrace up`)", param_hint="--bootstrap")
    conn = connection_for(s)
    check_reachable(conn)
    return conn


@contextmanager
def service_connection(where: Where) -> Iterator[KafkaConnection]:
    """The named cluster, or an embedded broker for the duration of the command."""
    with kafka(where.settings) as conn:
        check_reachable(conn)
        yield conn


def key_values(values: list[str], *, lists: bool = False) -> dict[str, object]:
    """``-p KEY=VALUE`` options as a mapping; with ``lists``, a value with commas becomes the
    list of its parts (tune's tuple choices). Values stay text: the caller types them."""
    out: dict[str, object] = {}
    for v in values:
        key, sep, raw = v.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{v!r} is not KEY=VALUE", param_hint="--param")
        out[key] = raw.split(",") if lists and "," in raw else raw
    return out


def user_name() -> str:
    """Who runs this command, for an audit line. ``getpass.getuser`` raises for a uid with no
    passwd entry and no USER (a pod's uid 10001 has none)."""
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"
