"""``datasets put | list | show``: files and image folders into ``datasets/NAME.parquet``.

A Parquet, CSV or JSONL file, or a folder with one sub-folder of JPEG/PNG images per class,
becomes one Parquet file on the DFS with the column kinds in its schema metadata
(:mod:`.columns`). Images stay encoded (a binary column); training decodes them per batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from headrace.codecs import UnknownKind
from headrace.core.errors import PermanentError, ValidationFailed
from headrace.core.file_errors import without_contents
from headrace.core.naming import check_name, confined
from headrace.store.dfs import sha256_file, write_atomic
from headrace.store.signature import Kind
from headrace.trainers import columns
from headrace.trainers.columns import ColumnKind

DATASETS = "datasets"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
IMAGE_COLUMN = "image"


class DatasetFileError(PermanentError):
    """The input file or folder cannot become a dataset."""


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    uri: str  # relative to the DFS root: what ``train --dataset`` takes
    rows: int
    kinds: dict[str, str]  # column -> kind ("?" when not usable)
    types: dict[str, str]
    fingerprint: str
    bytes: int
    label: str | None = None
    label_counts: dict[str, int] = field(default_factory=dict)


def put_dataset(*, root: Path, path: Path, name: str | None = None, label: str = "label",
                image_columns: tuple[str, ...] = (), text_columns: tuple[str, ...] = (),
                kinds: dict[str, Kind] | None = None) -> DatasetInfo:
    """Read ``path``, check and record the column kinds, write ``datasets/NAME.parquet``."""
    if not path.exists():
        raise DatasetFileError(f"{path} does not exist")
    name = check_name(name or path.stem, what="dataset name")
    table = _read(path, label=label)
    forced: dict[str, Kind] = dict(kinds or {})
    forced.update({c: ColumnKind.IMAGE for c in image_columns})
    forced.update({c: ColumnKind.TEXT for c in text_columns})
    for c, kind in forced.items():
        if c not in table.column_names:
            raise DatasetFileError(f"{path.name} has no column {c!r}")
        try:
            columns.check_kind(table, c, kind)
        except (columns.ColumnError, UnknownKind) as exc:
            raise DatasetFileError(str(exc)) from None
    table = _fixed_tensors(table)
    found = columns.kinds_of(table, label=label if label in table.column_names else None,
                             forced=forced)
    table = columns.with_kinds(table, found)
    out = confined(root, DATASETS, f"{name}.parquet")
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    write_atomic(out, sink.getvalue().to_pybytes())
    return show_dataset(root=root, name=name, label=label)


def _read(path: Path, *, label: str) -> pa.Table:
    try:
        if path.is_dir():
            return _image_folder(path, label=label)
        suffix = path.suffix.lower()
        if suffix == ".parquet":
            return pq.read_table(path)
        if suffix == ".csv":
            import pyarrow.csv as pcsv

            return pcsv.read_csv(path)
        if suffix in (".jsonl", ".json", ".ndjson"):
            import pyarrow.json as pjson

            return pjson.read_json(path)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        raise DatasetFileError(f"{path.name} is not readable: {without_contents(exc)}"
                               ) from None
    raise DatasetFileError(f"{path.name}: use a .parquet, .csv or .jsonl file, or a folder "
                           f"of class sub-folders with images")


def _image_folder(path: Path, *, label: str) -> pa.Table:
    blobs: list[bytes] = []
    labels: list[str] = []
    for cls in sorted(p for p in path.iterdir() if p.is_dir()):
        for f in sorted(cls.iterdir()):
            if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES:
                blobs.append(f.read_bytes())
                labels.append(cls.name)
    if not blobs:
        raise DatasetFileError(f"{path} holds no class sub-folders with .png/.jpg images")
    return pa.table({IMAGE_COLUMN: pa.array(blobs, pa.binary()), label: pa.array(labels)})


def _fixed_tensors(table: pa.Table) -> pa.Table:
    """Variable-size list columns whose rows share one shape become nested fixed-size lists."""
    for i, name in enumerate(table.column_names):
        t = table.schema.field(name).type
        if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
            continue
        shape = columns.tensor_shape(table.column(name))
        if shape is None:
            continue
        values = table.column(name).combine_chunks()
        while pa.types.is_list(values.type) or pa.types.is_large_list(values.type):
            values = values.flatten()
        arr: pa.Array = values
        for size in reversed(shape):
            arr = pa.FixedSizeListArray.from_arrays(arr, size)
        table = table.set_column(i, name, arr)
    return table


def _path(root: Path, name: str) -> Path:
    name = name.removeprefix(f"{DATASETS}/").removesuffix(".parquet")
    try:
        return confined(root, DATASETS, f"{check_name(name, what='dataset name')}.parquet")
    except ValidationFailed as exc:
        raise DatasetFileError(str(exc)) from None


def show_dataset(*, root: Path, name: str, label: str | None = None) -> DatasetInfo:
    """Schema, kinds and label counts of ``datasets/NAME.parquet``; ``label`` None: the
    column ``datasets put`` recorded as the label, else ``label``."""
    path = _path(root, name)
    if not path.is_file():
        raise DatasetFileError(f"dataset {name!r} does not exist (datasets list shows them)")
    table = pq.read_table(path)
    if label is None:
        recorded = [c for c, k in columns.stored_kinds(table).items() if k == ColumnKind.LABEL]
        label = recorded[0] if recorded else "label"
    lab = label if label in table.column_names else None
    kinds = columns.kinds_of(table, label=lab)
    counts: dict[str, int] = {}
    if lab is not None:
        vc = pc.value_counts(table.column(lab).combine_chunks())
        counts = {str(v): int(n) for v, n in zip(vc.field("values").to_pylist(),
                                                 vc.field("counts").to_pylist(), strict=True)}
    return DatasetInfo(
        name=path.stem, uri=f"{DATASETS}/{path.name}", rows=table.num_rows,
        kinds={c: (k.value if k else "?") for c, k in kinds.items()},
        types={f.name: str(f.type) for f in table.schema}, fingerprint=sha256_file(path),
        bytes=path.stat().st_size, label=lab, label_counts=dict(sorted(counts.items())))


def list_datasets(*, root: Path) -> list[DatasetInfo]:
    d = root / DATASETS
    if not d.is_dir():
        return []
    out = []
    for p in sorted(d.glob("*.parquet")):
        try:
            meta = pq.read_metadata(p)
        except (pa.ArrowInvalid, OSError):
            continue
        out.append(DatasetInfo(name=p.stem, uri=f"{DATASETS}/{p.name}", rows=meta.num_rows,
                               kinds={}, types={}, fingerprint="", bytes=p.stat().st_size))
    return out
