"""Datasets: Parquet on the DFS through pyarrow, checked, split, fingerprinted; a demo maker."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from headrace.core.errors import PermanentError, RetriableError
from headrace.store.dfs import resolve_dataset, sha256_file, write_atomic
from headrace.store.manifest import DatasetIdentity
from headrace.streams.contracts import ModelSpec, Task


class DatasetError(PermanentError):
    """The dataset cannot be used: missing, unreadable, missing or wrong-typed columns."""


@dataclass(frozen=True)
class Dataset:
    features: tuple[str, ...]
    label: str
    classes: tuple[str, ...]  # empty for a regressor
    x: np.ndarray  # float32 [rows, features]
    y: np.ndarray  # int64 class index, or float32 target
    identity: DatasetIdentity

    @property
    def rows(self) -> int:
        return int(self.x.shape[0])


@dataclass(frozen=True)
class Split:
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
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
    features = tuple(spec.features) if spec.features else tuple(c for c in cols if c != spec.label)
    missing = [c for c in features if c not in cols]
    if missing:
        raise DatasetError(f"dataset {uri!r} lacks feature columns: {', '.join(missing[:5])}")
    if not features:
        raise DatasetError(f"dataset {uri!r} has no feature columns")
    if table.num_rows < 10:
        raise DatasetError(f"dataset {uri!r} has {table.num_rows} rows; at least 10 are needed")
    bad = [f"{c} ({table.schema.field(c).type})" for c in features
           if not _numeric(table.schema.field(c).type)]
    if bad:
        raise DatasetError(
            f"dataset {uri!r}: feature columns must be numeric: {', '.join(bad[:5])}")
    for c in features:
        if table.column(c).null_count:
            raise DatasetError(f"dataset {uri!r}: feature column {c!r} has null values")
    x = np.stack([table.column(c).to_numpy().astype(np.float32) for c in features], axis=1)
    if not np.isfinite(x).all():
        raise DatasetError(f"dataset {uri!r}: features contain NaN or infinite values")
    label_col = table.column(spec.label)
    if label_col.null_count:
        raise DatasetError(f"dataset {uri!r}: label column {spec.label!r} has null values")
    ltype = table.schema.field(spec.label).type
    classes: tuple[str, ...] = ()
    if spec.task == Task.CLASSIFIER:
        if not (pa.types.is_integer(ltype) or pa.types.is_string(ltype)
                or pa.types.is_large_string(ltype) or pa.types.is_boolean(ltype)):
            raise DatasetError(
                f"dataset {uri!r}: classifier label {spec.label!r} must be integer or string, "
                f"not {ltype}")
        raw = label_col.to_pylist()
        uniq = sorted(set(raw), key=lambda v: (isinstance(v, str), v))
        if len(uniq) < 2:
            raise DatasetError(f"dataset {uri!r}: label {spec.label!r} has a single class")
        if len(uniq) > 10_000:
            raise DatasetError(f"dataset {uri!r}: label {spec.label!r} has {len(uniq)} classes")
        classes = tuple(str(v) for v in uniq)
        index = {v: i for i, v in enumerate(uniq)}
        y = np.array([index[v] for v in raw], dtype=np.int64)
    else:
        if not _numeric(ltype):
            raise DatasetError(
                f"dataset {uri!r}: regressor label {spec.label!r} must be numeric, not {ltype}")
        y = label_col.to_numpy().astype(np.float32)
    return Dataset(features, spec.label, classes, x, y,
                   DatasetIdentity(uri=uri, fingerprint=fingerprint, rows=table.num_rows))


def _numeric(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t))


def split(ds: Dataset, *, validation_split: float, seed: int) -> Split:
    """A deterministic shuffled split: the same data and seed always give the same split."""
    order = np.random.default_rng(seed).permutation(ds.rows)
    n_val = max(1, round(ds.rows * validation_split))
    if n_val >= ds.rows:
        raise DatasetError("validation split leaves no training rows")
    val, train = order[:n_val], order[n_val:]
    return Split(ds.x[train], ds.y[train], ds.x[val], ds.y[val])


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
