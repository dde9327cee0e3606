"""Model code packages on the DFS, immutable and content-addressed: ``code/<name>/<sha256>/``.

``push`` copies a directory of Python modules (and their data files) into the store:

1. Read every file (skipping ``__pycache__``, ``*.pyc`` and hidden names); refuse a symlink
   that leaves the directory, special files, unsafe names, and more than the size limits.
2. The digest: sha256 over the sorted ``"<sha256 of the file>  <relative path>\\n"`` lines
   (a ``sha256sum`` listing), so it covers every path and every byte.
3. Write the files into ``code/<name>/.staging/<random>/`` plus ``.headrace-code.json``
   (the listing, size, push time), fsync, and rename to ``code/<name>/<digest>/``. A version
   is never overwritten: pushing the same bytes again returns the stored version.

``verify`` reads a version back and recomputes the digest from what is on the DFS (any file
changed, added or removed is refused); the trainer imports only the bytes it verified.
``check_entrypoint`` checks statically (``ast``, nothing executed) that ``module:function``
exists, so the control plane can refuse a bad request without running user code.
"""

from __future__ import annotations

import ast
import errno
import hashlib
import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from headrace.core.errors import PermanentError, ValidationFailed
from headrace.core.naming import check_name, confined
from headrace.core.types import CODE_REF_PATTERN, CodeRef
from headrace.store.dfs import fsync_dir, write_atomic

CODE = "code"
STAGING = ".staging"
META = ".headrace-code.json"
MAX_FILES = 2000
MAX_BYTES = 64 * 1024 * 1024
REF_HEX = 12  # the printed reference: NAME@<first 12 hex of the digest>
_PART_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_SKIP_DIRS = ("__pycache__",)
_SKIP_SUFFIXES = (".pyc", ".pyo")


class CodeNotFound(ValidationFailed):
    """No registered code package matches the reference."""


class CodeTampered(ValidationFailed):
    """A stored code package no longer matches its digest."""


@dataclass(frozen=True)
class CodeVersion:
    name: str
    digest: str  # full sha256
    path: Path
    files: dict[str, str]  # relative path -> sha256
    size: int
    pushed_at: str

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.digest[:REF_HEX]}"


def code_dir(root: Path, name: str) -> Path:
    return confined(root, CODE, check_name(name, what="code name"))


def digest_of(files: dict[str, str]) -> str:
    """The package digest from its listing (relative path -> sha256 of the bytes)."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{files[rel]}  {rel}\n".encode())
    return h.hexdigest()


def collect(src: Path) -> dict[str, bytes]:
    """The files of a package directory, by relative path (see the module docstring)."""
    if not src.is_dir():
        raise ValidationFailed(f"{src} is not a directory")
    base = src.resolve()
    out: dict[str, bytes] = {}
    total = 0
    seen: set[Path] = set()
    for dirpath, dirnames, filenames in os.walk(base, followlinks=True):
        real = Path(dirpath).resolve()
        if real != base and base not in real.parents:
            raise ValidationFailed(f"{Path(dirpath)} is a symlink leaving {src}")
        if real in seen:
            raise ValidationFailed(f"{Path(dirpath)} is a symlink loop")
        seen.add(real)
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for fn in sorted(filenames):
            if fn.startswith(".") or fn.endswith(_SKIP_SUFFIXES):
                continue
            path = Path(dirpath) / fn
            rel = path.relative_to(base).as_posix()
            target = path.resolve()
            if base not in target.parents:
                raise ValidationFailed(f"{rel} is a symlink leaving {src}")
            if not target.is_file():
                raise ValidationFailed(f"{rel} is not a regular file")
            if not all(_PART_RE.fullmatch(p) for p in rel.split("/")):
                raise ValidationFailed(f"{rel}: file names may use A-Z a-z 0-9 _ . - only")
            data = target.read_bytes()
            total += len(data)
            out[rel] = data
            if len(out) > MAX_FILES or total > MAX_BYTES:
                raise ValidationFailed(f"{src} holds more than {MAX_FILES} files or "
                                       f"{MAX_BYTES // 2**20} MiB")
    if not any(r.endswith(".py") for r in out):
        raise ValidationFailed(f"{src} holds no Python module (.py)")
    return out


def push(root: Path, src: Path, name: str) -> CodeVersion:
    """Store the package in ``src`` as ``code/<name>/<digest>/``; the same bytes twice give
    the same version (never overwritten)."""
    files = collect(src)
    listing = {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}
    digest = digest_of(listing)
    cdir = code_dir(root, name)
    final = cdir / digest
    if final.exists():
        return load(root, name, digest)
    staging = cdir / STAGING / uuid.uuid4().hex
    staging.mkdir(parents=True)
    try:
        for rel, data in files.items():
            write_atomic(staging / rel, data)
        meta = {"name": name, "digest": digest, "files": listing,
                "size": sum(len(d) for d in files.values()),
                "pushed_at": datetime.now(UTC).isoformat()}
        write_atomic(staging / META, json.dumps(meta, indent=2, sort_keys=True).encode())
        try:
            os.rename(staging, final)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            # Pushed by someone else meanwhile: same digest, same bytes.
        else:
            fsync_dir(cdir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return load(root, name, digest)


def load(root: Path, name: str, digest: str) -> CodeVersion:
    """A stored version's description (from its metadata; ``verify`` checks the bytes)."""
    path = code_dir(root, name) / digest
    try:
        meta = json.loads((path / META).read_bytes())
        return CodeVersion(name=name, digest=digest, path=path,
                           files={str(k): str(v) for k, v in meta["files"].items()},
                           size=int(meta["size"]), pushed_at=str(meta["pushed_at"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CodeTampered(f"code {name}@{digest[:REF_HEX]}: unreadable metadata "
                           f"({type(exc).__name__})") from None


def list_code(root: Path) -> list[CodeVersion]:
    """Every stored version, by name then push time."""
    base = root / CODE
    out: list[CodeVersion] = []
    if not base.is_dir():
        return out
    for ndir in sorted(base.iterdir()):
        if not ndir.is_dir():
            continue
        for vdir in ndir.iterdir():
            if re.fullmatch(r"[0-9a-f]{64}", vdir.name):
                try:
                    out.append(load(root, ndir.name, vdir.name))
                except PermanentError:
                    continue
    return sorted(out, key=lambda v: (v.name, v.pushed_at))


def resolve(root: Path, ref: str) -> CodeVersion:
    """``NAME@<hex prefix>`` to the one stored version it names."""
    if not re.fullmatch(CODE_REF_PATTERN, ref):
        raise ValidationFailed(f"code reference {ref!r} is not NAME@<12-64 hex>")
    name, prefix = ref.split("@", 1)
    cdir = code_dir(root, name)
    matches = sorted(p.name for p in cdir.iterdir()
                     if p.name.startswith(prefix) and len(p.name) == 64) if cdir.is_dir() else []
    if not matches:
        raise CodeNotFound(f"code {ref} is not registered (push it with `headrace code push`)")
    if len(matches) > 1:
        raise CodeNotFound(f"code {ref} is ambiguous: give more hex digits")
    return load(root, name, matches[0])


def verify(root: Path, ref: str) -> tuple[CodeVersion, dict[str, bytes]]:
    """Read the version back and check its digest; return it with the verified bytes."""
    cv = resolve(root, ref)
    files: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(cv.path):
        dirnames.sort()
        for fn in filenames:
            path = Path(dirpath) / fn
            rel = path.relative_to(cv.path).as_posix()
            if rel == META:
                continue
            if path.is_symlink() or not path.is_file():
                raise CodeTampered(f"code {cv.ref}: {rel} is not a regular file")
            files[rel] = path.read_bytes()
    listing = {rel: hashlib.sha256(d).hexdigest() for rel, d in files.items()}
    if digest_of(listing) != cv.digest:
        raise CodeTampered(f"code {cv.ref}: its files no longer match its sha256 "
                           f"({_difference(cv.files, listing)})")
    return cv, files


def _difference(pushed: dict[str, str], now: dict[str, str]) -> str:
    changed = sorted(r for r in pushed if r in now and now[r] != pushed[r])
    added = sorted(set(now) - set(pushed))
    removed = sorted(set(pushed) - set(now))
    parts = ([f"changed {', '.join(changed[:3])}"] if changed else []) + \
        ([f"added {', '.join(added[:3])}"] if added else []) + \
        ([f"removed {', '.join(removed[:3])}"] if removed else [])
    return "; ".join(parts) or "listing altered"


def module_file(files: dict[str, bytes], module: str) -> str | None:
    """The relative path holding ``pkg.module`` (a module file or a package's __init__)."""
    base = module.replace(".", "/")
    for rel in (f"{base}.py", f"{base}/__init__.py"):
        if rel in files:
            return rel
    return None


def check_entrypoint(files: dict[str, bytes], ref: CodeRef) -> None:
    """Refuse an entrypoint whose module or top-level name does not exist (nothing runs)."""
    module, _, func = ref.entrypoint.partition(":")
    rel = module_file(files, module)
    if rel is None:
        raise ValidationFailed(f"entrypoint {ref.entrypoint}: code {ref.code} has no module "
                               f"{module}")
    try:
        tree = ast.parse(files[rel], filename=rel)
    except (SyntaxError, ValueError) as exc:
        raise ValidationFailed(f"entrypoint {ref.entrypoint}: {rel} does not parse: "
                               f"{str(exc).splitlines()[0]}") from None
    if func not in _top_level_names(tree):
        raise ValidationFailed(f"entrypoint {ref.entrypoint}: {rel} defines no {func}")


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names
