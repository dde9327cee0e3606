"""Datasets: Parquet on the DFS through pyarrow, checked, split, fingerprinted; a demo maker."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from headrace import codecs
from headrace.contracts import ModelSpec, Task
from headrace.core.errors import PermanentError, RetriableError
from headrace.store.dfs import resolve_dataset, sha256_file, write_atomic
from headrace.store.manifest import DatasetIdentity
from headrace.store.signature import Kind, ModelInput
from headrace.trainers import columns
from headrace.trainers.columns import ColumnKind
from headrace.trainers.inputs import FEATURES, Inputs

INPUT_NAME = r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$"  # store.signature's input names


class DatasetError(PermanentError):
    """The dataset cannot be used: missing, unreadable, missing or wrong-typed columns."""


@dataclass(frozen=True)
class Dataset:
    features: tuple[str, ...]
    label: str
    classes: tuple[str, ...]  # empty for a regressor
    x: Inputs  # every model input, rows first
    y: np.ndarray  # int64 class index, or float32 target
    identity: DatasetIdentity

    @property
    def rows(self) -> int:
        return len(self.x)


@dataclass(frozen=True)
class Split:
    x_train: Inputs
    y_train: np.ndarray
    x_val: Inputs
    y_val: np.ndarray


def load_dataset(*, root: Path, uri: str, spec: ModelSpec) -> Dataset:
    """Read and check a Parquet dataset; every problem is one ``DatasetError`` line."""
    resolved = resolve_dataset(root, uri)
    try:
        if isinstance(resolved, Path):
            if resolved.is_dir():
                files = sorted(p for p in resolved.rglob("*.parquet") if p.is_file())
                if not files:
                    raise DatasetError(f"dataset {uri!r} holds no .parquet files")
                table = pq.read_table(resolved)
                fingerprint = _fingerprint(files)
            else:
                table = pq.read_table(resolved)
                fingerprint = sha256_file(resolved)
        else:
            import pyarrow.fs as pafs

            fs, path = pafs.FileSystem.from_uri(resolved)
            table = pq.read_table(path, filesystem=fs)
            fingerprint = "unknown:" + str(table.num_rows)
    except DatasetError:
        raise
    except PermanentError as exc:
        raise DatasetError(str(exc)) from None
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise DatasetError(f"dataset {uri!r} is not readable Parquet: {_line(exc)}") from None
    except OSError as exc:
        raise RetriableError(f"dataset {uri!r} could not be read: {_line(exc)}") from None
    return _to_arrays(table, uri=uri, fingerprint=fingerprint, spec=spec)


def _fingerprint(files: list[Path]) -> str:
    import hashlib

    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + sha256_file(f).encode())
    return h.hexdigest()


def _line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _to_arrays(table: pa.Table, *, uri: str, fingerprint: str, spec: ModelSpec) -> Dataset:
    cols = table.column_names
    if spec.label not in cols:
        raise DatasetError(f"dataset {uri!r} has no label column {spec.label!r}")
    kinds = columns.kinds_of(table, label=spec.label)
    features = (tuple(spec.features) if spec.features else
                tuple(c for c in cols if c != spec.label and kinds[c] != ColumnKind.LABEL))
    missing = [c for c in features if c not in cols]
    if missing:
        raise DatasetError(f"dataset {uri!r} lacks feature columns: {', '.join(missing[:5])}")
    if not features:
        raise DatasetError(f"dataset {uri!r} has no feature columns")
    if table.num_rows < 10:
        raise DatasetError(f"dataset {uri!r} has {table.num_rows} rows; at least 10 are needed")
    bad = [f"{c} ({table.schema.field(c).type})" for c in features if kinds[c] is None]
    if bad:
        raise DatasetError(f"dataset {uri!r}: feature columns must be "
                           f"{codecs.kinds_listed()}: {', '.join(bad[:5])}")
    for c in features:
        kind = kinds[c]
        assert kind is not None
        if table.column(c).null_count and not _codec(kind, uri, c).nulls:
            raise DatasetError(f"dataset {uri!r}: feature column {c!r} has null values")
    x = _inputs(table, features, kinds, uri=uri, spec=spec)
    label_col = table.column(spec.label)
    if label_col.null_count:
        raise DatasetError(f"dataset {uri!r}: label column {spec.label!r} has null values")
    ltype = table.schema.field(spec.label).type
    classes: tuple[str, ...] = ()
    if spec.task == Task.CLASSIFIER:
        if not (pa.types.is_integer(ltype) or columns.is_string(ltype)
                or pa.types.is_boolean(ltype)):
            raise DatasetError(
                f"dataset {uri!r}: classifier label {spec.label!r} must be integer or string, "
                f"not {ltype}")
        uniq_arr = pc.unique(label_col)
        uniq = sorted(uniq_arr.to_pylist(), key=lambda v: (isinstance(v, str), v))
        if len(uniq) < 2:
            raise DatasetError(f"dataset {uri!r}: label {spec.label!r} has a single class")
        if len(uniq) > 10_000:
            raise DatasetError(f"dataset {uri!r}: label {spec.label!r} has {len(uniq)} classes")
        classes = tuple(str(v) for v in uniq)
        y = pc.index_in(label_col, value_set=pa.array(uniq, type=label_col.type)
                        ).to_numpy().astype(np.int64)
    else:
        if not columns.is_numeric(ltype):
            raise DatasetError(
                f"dataset {uri!r}: regressor label {spec.label!r} must be numeric, not {ltype}")
        y = label_col.to_numpy().astype(np.float32)
    return Dataset(features, spec.label, classes, x, y,
                   DatasetIdentity(uri=uri, fingerprint=fingerprint, rows=table.num_rows))


def _codec(kind: Kind, uri: str, column: str) -> codecs.Codec:
    try:
        return codecs.codec(kind)
    except codecs.UnknownKind as exc:
        raise DatasetError(f"dataset {uri!r}: column {column!r}: {exc}") from None


def _inputs(table: pa.Table, features: tuple[str, ...], kinds: dict[str, Kind | None],
            *, uri: str, spec: ModelSpec) -> Inputs:
    """The signature and arrays, by each column's codec: a kind that reads several fields
    (numeric) makes one input of all its columns (``features``, in column order), first; every
    other column is its own input named after it."""
    sig: list[ModelInput] = []
    arrays: dict[str, np.ndarray] = {}
    grouped: dict[str, list[str]] = {}
    single: list[str] = []
    for c in features:
        kind = kinds[c]
        assert kind is not None
        if _codec(kind, uri, c).multi_field:
            grouped.setdefault(str(kind), []).append(c)
        else:
            single.append(c)
    for group, names in grouped.items():
        try:
            inp, values = codecs.codec(group).dataset_input(tuple(names), table, spec)
        except PermanentError as exc:
            raise DatasetError(f"dataset {uri!r}: {exc}") from None
        sig.append(inp)
        arrays[inp.name] = values
    for c in single:
        if not re.match(INPUT_NAME, c) or c == FEATURES:
            raise DatasetError(f"dataset {uri!r}: column {c!r} cannot name a model input "
                               f"(letters, digits, _ . -; not {FEATURES!r}): rename it")
        kind = kinds[c]
        assert kind is not None
        try:
            inp, values = codecs.codec(kind).dataset_input((c,), table, spec)
        except PermanentError as exc:
            raise DatasetError(f"dataset {uri!r}: column {c!r}: {exc}") from None
        sig.append(inp)
        arrays[c] = values
    return Inputs(arrays, tuple(sig))


def split(ds: Dataset, *, validation_split: float, seed: int) -> Split:
    """A deterministic shuffled split: the same data and seed always give the same split. A
    classifier's split is stratified: each class (of two rows or more) gives the same share of
    its rows to validation, so both splits hold the same class mix."""
    rng = np.random.default_rng(seed)
    n_val = max(1, round(ds.rows * validation_split))
    if n_val >= ds.rows:
        raise DatasetError("validation split leaves no training rows")
    if not ds.classes:
        order = rng.permutation(ds.rows)
        val, train = order[:n_val], order[n_val:]
    else:
        val, train = _stratified(ds.y.astype(np.int64), validation_split, rng)
    return Split(ds.x[train], ds.y[train], ds.x[val], ds.y[val])


def _stratified(y: np.ndarray, share: float, rng: np.random.Generator
                ) -> tuple[np.ndarray, np.ndarray]:
    val: list[np.ndarray] = []
    train: list[np.ndarray] = []
    for c in np.unique(y):
        rows = rng.permutation(np.flatnonzero(y == c))
        k = min(len(rows) - 1, max(1, round(len(rows) * share))) if len(rows) > 1 else 0
        val.append(rows[:k])
        train.append(rows[k:])
    v, t = np.concatenate(val), np.concatenate(train)
    if len(v) == 0 or len(t) == 0:
        raise DatasetError("validation split leaves no training or no validation rows")
    # Shuffled across classes: batches drawn from the front are mixed.
    return rng.permutation(v), rng.permutation(t)


def make_demo(*, out: Path, rows: int = 2000, features: int = 32, classes: int = 3,
              task: Task = Task.CLASSIFIER, seed: int = 0, noise: float = 0.5) -> Path:
    """A small, learnable, deterministic labelled dataset: ``f0..f{n-1}`` and ``label``.

    Classifier: class centres in feature space plus Gaussian noise; label is an int.
    Regressor: a noisy linear function of the features; label is a float.
    """
    if rows < 10:
        raise DatasetError("a demo dataset needs at least 10 rows")
    rng = np.random.default_rng(seed)
    if task == Task.CLASSIFIER:
        centres = rng.normal(0.0, 1.5, size=(classes, features)).astype(np.float32)
        y = rng.integers(0, classes, size=rows)
        x = centres[y] + rng.normal(0.0, noise * 2, size=(rows, features)).astype(np.float32)
        label = pa.array(y.astype(np.int64))
    else:
        w = rng.normal(0.0, 1.0, size=features).astype(np.float32)
        x = rng.normal(0.0, 1.0, size=(rows, features)).astype(np.float32)
        target = x @ w + rng.normal(0.0, noise, size=rows).astype(np.float32)
        label = pa.array(target.astype(np.float32))
    cols = {f"f{i}": pa.array(x[:, i].astype(np.float32)) for i in range(features)}
    cols["label"] = label
    table = pa.table(cols)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    write_atomic(out, sink.getvalue().to_pybytes())
    return out
