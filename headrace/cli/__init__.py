"""The ``headrace`` command: a thin shell over the packages; it holds no logic of its own.

Settings are read once here and handed down. Every ``HeadraceError`` becomes one line on
stderr and its exit code; nothing the user can cause prints a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from typer.exceptions import Abort, Exit, TyperException

from headrace import __version__
from headrace.cli import (
    _context,
    _extras,
    code_cmd,
    drift_cmd,
    labels_cmd,
    lineage_cmd,
    models_cmd,
    ops_cmd,
    predict_cmd,
    scorers_cmd,
    streams_cmd,
    topology_cmd,
    trainers_cmd,
    tune_cmd,
)
from headrace.cli._help import HelpGroup
from headrace.core.errors import FatalError, HeadraceError, PermanentError, RetriableError

app = typer.Typer(
    name="headrace",
    cls=HelpGroup,
    help="Event-driven ML pipeline on Kafka: triggered training, versioned models, "
    "streaming scoring.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click help: it re-wraps every paragraph to the terminal, so at 80 columns nothing
    # is squeezed into a narrow box column or cut.
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"headrace {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    bootstrap: Annotated[str | None, typer.Option(
        "--bootstrap", "-b", help="Kafka bootstrap servers (env HEADRACE_BOOTSTRAP); "
        "unset: the embedded broker.")] = None,
    dfs_root: Annotated[Path | None, typer.Option(
        "--dfs-root", help="Shared filesystem root (env HEADRACE_DFS_ROOT).")] = None,
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    ctx.obj = _context.CliContext(bootstrap=bootstrap, dfs_root=dfs_root)


# Every command area, each a thin shell over its package. Importing one imports no role's
# library (tests/cli/test_lazy_roles.py; tools/check_wheel.sh on the wheel with one extra):
# a command whose extra is missing says so in one line when it runs (cli/_extras.py).
COMMANDS: tuple[Callable[[typer.Typer], None], ...] = (
    streams_cmd.register,
    trainers_cmd.register,  # and the datasets group
    code_cmd.register,
    scorers_cmd.register,
    predict_cmd.register,
    ops_cmd.register,
    topology_cmd.register,
    tune_cmd.register,
    drift_cmd.register,
    lineage_cmd.register,
    models_cmd.register,
    labels_cmd.register,
)
for _register in COMMANDS:
    _register(app)
for _group in app.registered_groups:
    if not (isinstance(_group.cls, type) and issubclass(_group.cls, HelpGroup)):
        _group.cls = HelpGroup  # a group with its own subclass (tune) keeps it


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return (and with ``sys.exit``, exit with) its code."""
    try:
        # Without standalone mode, click hands back the code of a typer.Exit instead of raising.
        code = app(args=argv, standalone_mode=False)
    except Exit as exc:
        return _exit(int(exc.exit_code or 0), argv)
    except Abort:
        print("headrace: aborted", file=sys.stderr)
        return _exit(130, argv)
    except TyperException as exc:  # usage errors: bad option, bad value, missing argument
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        hint = getattr(exc, "param_hint", None)
        hint = f" ({hint})" if isinstance(hint, str) and hint not in message else ""
        print(f"headrace: {message}{hint}{_global_option_hint(exc, argv)}", file=sys.stderr)
        return _exit(int(getattr(exc, "exit_code", 2)), argv)
    except KeyboardInterrupt:
        print("headrace: interrupted", file=sys.stderr)
        return _exit(130, argv)
    except HeadraceError as exc:
        print(f"headrace: {_kind(exc)}{exc}", file=sys.stderr)
        return _exit(exc.exit_code, argv)
    except ModuleNotFoundError as exc:  # a role's library whose extra is not installed
        line = _extras.missing_extra(exc)
        if line is None:
            raise
        print(f"headrace: error: {line}", file=sys.stderr)
        return _exit(2, argv)
    except (OSError, ValueError) as exc:
        print(f"headrace: error: {exc}", file=sys.stderr)
        return _exit(1, argv)
    return _exit(code if isinstance(code, int) else 0, argv)


GLOBAL_OPTIONS = ("--bootstrap", "-b", "--dfs-root", "--version")


def _global_option_hint(exc: TyperException, argv: list[str] | None) -> str:
    """A root option given after the command is unknown there: say where it goes."""
    name = getattr(exc, "option_name", None)
    if not isinstance(name, str) or name.split("=")[0] not in GLOBAL_OPTIONS:
        return ""
    args = list(sys.argv[1:] if argv is None else argv)
    at = next((i for i, a in enumerate(args) if a.split("=")[0] == name.split("=")[0]), None)
    if at is not None:  # the same line with the option moved to the front
        moved = args[at:at + 1] if "=" in args[at] else args[at:at + 2]
        rest = args[:at] + args[at + len(moved):]
        example = " ".join(["headrace", *moved, *rest])
    else:
        example = "headrace --bootstrap HOST:PORT score demo"
    return f"; global options go before the command: {example}"


def _kind(exc: HeadraceError) -> str:
    if isinstance(exc, RetriableError):
        return "unavailable: "
    if isinstance(exc, PermanentError):
        return "invalid: "
    if isinstance(exc, FatalError):
        return "error: "
    return ""


def _exit(code: int, argv: list[str] | None) -> int:
    if argv is None:
        sys.exit(code)
    return code
