"""The alias's intact previous version, for a scorer that has nothing to serve because the
version its alias names is corrupt (a file's sha256 no longer matches, the manifest changed) or
does not load.

Candidates, newest first: the pointer's ``previous``, then every other version the alias's
history names. Each must still be the version that was promoted (its manifest's sha256 equals
the one recorded in the history) and pass the usual verification and warm-up. The scorer
serves it with a warning naming the corrupt version and the command that makes the fallback
the alias's own version; it keeps watching the alias and swaps as soon as that is fixed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from headrace.core.errors import HeadraceError
from headrace.scorers.engine.models import LoadedModel
from headrace.store.versions import AliasPointer, alias_history

log = logging.getLogger(__name__)


def candidates(root: Path, name: str, alias: str, pointer: AliasPointer) -> list[tuple[int, str]]:
    """(version, manifest sha256 when it was promoted) to try, newest first; never the
    pointer's own version."""
    history = alias_history(root, name, alias)
    sha = {p.version: p.manifest_sha256 for p in history}  # the latest promotion of each
    order: list[int] = [pointer.previous] if pointer.previous is not None else []
    order += [p.version for p in reversed(history)]
    out: list[tuple[int, str]] = []
    for v in order:
        if v != pointer.version and v not in [c[0] for c in out]:
            out.append((v, sha.get(v, "")))
    return out


def fallback_message(name: str, alias: str, pointer: AliasPointer, served: int,
                     problem: str) -> str:
    """The warning: what is corrupt, what is served instead, and how to make that official."""
    fix = (f"`headrace models rollback {name}` points {alias} back at it"
           if pointer.previous == served and alias == "production" else
           f"`headrace models promote {name}:{served}` points production at it")
    return (f"model {name}@{alias} names {name}:{pointer.version}, which cannot be served "
            f"({problem}); serving {name}:{served}, the alias's most recent intact previous "
            f"version, instead. {fix}; or republish {name}:{pointer.version}. Watching the "
            f"alias: a fixed or moved {alias} is served as soon as it loads")


def load_previous(root: Path, name: str, alias: str, pointer: AliasPointer,
                  load: Callable[[str], LoadedModel]) -> LoadedModel | None:
    """The first candidate that loads (``load``: ``NAME:VERSION``, verified and warmed)
    and is still the version that was promoted; None if none does."""
    for version, promoted_sha in candidates(root, name, alias, pointer):
        ref = f"{name}:{version}"
        try:
            model = load(ref)
        except HeadraceError as exc:
            log.warning("fallback %s refused: %s", ref, exc)
            continue
        if promoted_sha and model.manifest_sha256 != promoted_sha:
            log.warning("fallback %s refused: its manifest changed since it was %s", ref, alias)
            continue
        return model
    return None
