"""Publish, list, verify and load model versions; move aliases atomically.

Publish protocol (a version is visible only when complete):

1. Write every file into ``models/<name>/.staging/<random>/``.
2. Hash every file; write ``manifest.json`` last, fsynced.
3. Rename the staging directory to ``models/<name>/<version>`` -- the next free number. A
   rename onto an existing version fails, so a version is never overwritten; a racing
   publisher takes the next number.
4. Optionally move an alias (``production``) by atomically replacing its pointer file.

A crash before step 3 leaves only staging litter, which readers never look at.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from headrace import __version__
from headrace.core.errors import FatalError, PermanentError, RetriableError, ValidationFailed
from headrace.core.naming import check_name
from headrace.store.dfs import fsync_dir, model_dir, sha256_file, write_atomic
from headrace.store.manifest import MANIFEST, Manifest

STAGING = ".staging"
ALIASES = "aliases"
PRODUCTION = "production"


class IntegrityError(PermanentError):
    """A version's files do not match its manifest."""


class VersionNotFound(PermanentError):
    """No such model, version or alias."""


@dataclass(frozen=True)
class ModelVersion:
    name: str
    version: int
    path: Path
    manifest: Manifest
    manifest_sha256: str


@dataclass(frozen=True)
class AliasPointer:
    version: int
    manifest_sha256: str
    previous: int | None
    updated_at: str
    reason: str = ""


# Test hook: called with a step name at each publish step, so a fault test can crash there.
PublishHook = Callable[[str], None]


def _noop(step: str) -> None:
    return None


def publish(
    root: Path,
    manifest: Manifest,
    write_files: Callable[[Path], None],
    *,
    hook: PublishHook = _noop,
) -> ModelVersion:
    """Stage, hash, write the manifest last, and rename into the next free version."""
    mdir = model_dir(root, manifest.name)
    sweep_staging(mdir)
    staging = mdir / STAGING / uuid.uuid4().hex
    try:
        staging.mkdir(parents=True)
        write_files(staging)
        hook("files-written")
        files = {
            str(p.relative_to(staging)): sha256_file(p)
            for p in sorted(staging.rglob("*")) if p.is_file()
        }
        if MANIFEST in files:
            raise FatalError("a model's files must not include manifest.json")
        hook("files-hashed")
        for attempt in range(1000):
            version = _next_version(mdir) + attempt
            final = manifest.model_copy(update={
                "version": version, "files": files,
                "code_version": manifest.code_version or __version__})
            write_atomic(staging / MANIFEST, final.model_dump_json(indent=2).encode())
            hook("manifest-written")
            try:
                os.rename(staging, mdir / str(version))
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    continue  # another publisher took this number
                raise
            fsync_dir(mdir)
            hook("renamed")
            return load_version(root, manifest.name, version)
        raise FatalError(f"could not allocate a version for {manifest.name}")
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise RetriableError(f"publishing {manifest.name} failed on the DFS: {exc}") from exc


STALE_STAGING_S = 6 * 3600  # far longer than any publish; younger ones may be in progress


def sweep_staging(mdir: Path, *, older_than_s: float = STALE_STAGING_S) -> list[str]:
    """Remove staging directories a crashed publisher left behind (a chief killed
    mid-publish); the names removed. Readers never look there; this only frees the space."""
    removed: list[str] = []
    cutoff = time.time() - older_than_s
    try:
        entries = list((mdir / STAGING).iterdir())
    except OSError:
        return removed
    for entry in entries:
        try:
            stale = entry.stat().st_mtime < cutoff
        except OSError:
            continue
        if stale:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed


def _next_version(mdir: Path) -> int:
    return max(list_versions_in(mdir), default=0) + 1


def list_versions_in(mdir: Path) -> list[int]:
    if not mdir.is_dir():
        return []
    return sorted(int(p.name) for p in mdir.iterdir() if p.name.isdecimal() and p.is_dir())


def list_models(root: Path) -> list[str]:
    base = root / "models"
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))


def list_versions(root: Path, name: str) -> list[int]:
    return list_versions_in(model_dir(root, name))


def read_manifest(path: Path) -> tuple[Manifest, str]:
    mpath = path / MANIFEST
    try:
        raw = mpath.read_bytes()
    except FileNotFoundError:
        raise IntegrityError(f"{path} has no manifest") from None
    try:
        return Manifest.model_validate_json(raw), _sha256_bytes(raw)
    except ValidationError as exc:
        raise IntegrityError(f"{mpath} is not a valid manifest: {exc.errors()[0]['msg']}") from None


def _sha256_bytes(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def load_version(root: Path, name: str, version: int, *, verify: bool = True) -> ModelVersion:
    """A complete version, its every file checked against the manifest's sha256."""
    path = model_dir(root, name) / str(int(version))
    if not path.is_dir():
        raise VersionNotFound(f"model {name} has no version {version}")
    manifest, digest = read_manifest(path)
    if manifest.name != name or manifest.version != version:
        raise IntegrityError(f"{path}: manifest names {manifest.name}:{manifest.version}")
    if verify:
        verify_files(path, manifest)
    return ModelVersion(name, version, path, manifest, digest)


def verify_files(path: Path, manifest: Manifest) -> None:
    for rel, expected in manifest.files.items():
        f = path / rel
        if not f.is_file():
            raise IntegrityError(f"{name_ver(manifest)}: file {rel} is missing")
        actual = sha256_file(f)
        if actual != expected:
            raise IntegrityError(
                f"{name_ver(manifest)}: file {rel} has sha256 {actual[:12]}…, "
                f"manifest says {expected[:12]}…"
            )


def name_ver(manifest: Manifest) -> str:
    return f"{manifest.name}:{manifest.version}"


def _alias_path(root: Path, name: str, alias: str) -> Path:
    return model_dir(root, name) / ALIASES / f"{check_name(alias, what='alias')}.json"


def read_alias(root: Path, name: str, alias: str = PRODUCTION) -> AliasPointer | None:
    try:
        data = json.loads(_alias_path(root, name, alias).read_bytes())
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, OSError) as exc:
        raise RetriableError(f"alias {name}@{alias} unreadable: {exc}") from None
    return AliasPointer(**data)


def set_alias(root: Path, name: str, version: int, *, alias: str = PRODUCTION,
              reason: str = "") -> AliasPointer:
    """Point ``alias`` at a verified version by atomically replacing the pointer file."""
    mv = load_version(root, name, version)
    current = read_alias(root, name, alias)
    pointer = AliasPointer(
        version=version,
        manifest_sha256=mv.manifest_sha256,
        previous=current.version if current else None,
        updated_at=datetime.now(UTC).isoformat(),
        reason=reason,
    )
    path = _alias_path(root, name, alias)
    write_atomic(path, json.dumps(pointer.__dict__).encode())
    with open(path.with_suffix(".history.jsonl"), "a") as log:
        log.write(json.dumps(pointer.__dict__) + "\n")
    return pointer


def alias_history(root: Path, name: str, alias: str = PRODUCTION) -> list[AliasPointer]:
    path = _alias_path(root, name, alias).with_suffix(".history.jsonl")
    if not path.exists():
        return []
    return [AliasPointer(**json.loads(line)) for line in path.read_text().splitlines() if line]


def resolve(root: Path, ref: str) -> ModelVersion:
    """``name``, ``name:VERSION`` or ``name@alias`` to a verified version."""
    if ":" in ref:
        name, _, ver = ref.partition(":")
        if not ver.isdecimal():
            raise ValidationFailed(f"bad model reference {ref!r}: version must be a number")
        return load_version(root, check_name(name, what="model name"), int(ver))
    name, _, alias = ref.partition("@")
    pointer = read_alias(root, check_name(name, what="model name"), alias or PRODUCTION)
    if pointer is None:
        raise VersionNotFound(f"model {name} has no {alias or PRODUCTION} version")
    mv = load_version(root, name, pointer.version)
    if mv.manifest_sha256 != pointer.manifest_sha256:
        raise IntegrityError(f"{name}:{pointer.version} manifest changed since it was promoted")
    return mv
