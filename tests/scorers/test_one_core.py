"""One scoring core, three callers: for every input kind (image, tensor, text, tabular) and every
framework, the live scorer's predictions of JSON, raw-image and Arrow records, a ``replay
--model`` re-score of the same range, and ``headrace.models.load(...).predict`` of the same
records are the same predictions (same scores, labels, top-k, version), record by record."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from headrace import models
from headrace.core.settings import Settings
from headrace.ops import replaying
from headrace.store.versions import ModelVersion
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection
from headrace.streams.codecs import decode_arrow, encode_arrow
from headrace.streams.topics import data_topic
from tests.fixtures import read_all
from tests.scorers import signature_models as sm
from tests.scorers import torch_models as tm
from tests.scorers.conftest import publish_mx, publish_tf, rows, score
from tests.scorers.test_scoring_signatures import produce

# Where each record was read from: the only fields that differ between the three callers.
WHERE = ("source_topic", "source_partition", "source_offset")


def _images(n: int) -> list[dict[str, Any]]:
    return [{"image": sm.encode(img)} for img in sm.digits(n)]


def _grids(n: int) -> list[dict[str, Any]]:
    x = np.random.default_rng(2).normal(size=(n, 4, 3)).round(3)
    return [{"grid": g.tolist()} for g in x]


def _texts(n: int) -> list[dict[str, Any]]:
    words = ["good", "bad", "great", "the", "plot", "movie", "awful", "zzz"]
    return [{"text": " ".join(words[(i + j) % 8] for j in range(i % 5 + 1))} for i in range(n)]


def _reviews(n: int) -> list[dict[str, Any]]:
    return [{**t, "age": float(i), "size": 1.5 * i} for i, t in
            enumerate({"review": r["text"]} for r in _texts(n))]


Publish = Callable[[Path, str], ModelVersion]
CASES: dict[str, tuple[Publish, Callable[[int], list[dict[str, Any]]]]] = {
    "tf-image": (lambda d, n: sm.tf_digits(d, n)[0], _images),
    "mx-image": (lambda d, n: sm.mx_digits(d, n)[0], _images),
    "tf-tensor": (lambda d, n: sm.tf_tensor(d, n)[0], _grids),
    "mx-tensor": (lambda d, n: sm.mx_tensor(d, n)[0], _grids),
    "tf-text": (lambda d, n: sm.tf_text(d, n)[0], _texts),
    "mx-text": (lambda d, n: sm.mx_text_and_meta(d, n)[0], _reviews),
    "tf-tabular": (lambda d, n: publish_tf(d, n), lambda k: rows(k)),
    "mx-tabular": (lambda d, n: publish_mx(d, n), lambda k: rows(k)),
    "pt-image": (tm.pt_digits, _images),
    "pt-tensor": (tm.pt_tensor, _grids),
    "pt-text": (tm.pt_text, _texts),
    "pt-tabular": (tm.pt_tabular, lambda k: rows(k)),
}


def _json_record(row: dict[str, Any]) -> dict[str, Any]:
    return {k: base64.b64encode(v).decode() if isinstance(v, bytes) else v
            for k, v in row.items()}


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    _approx({k: v for k, v in a.items() if k not in WHERE},
            {k: v for k, v in b.items() if k not in WHERE})


def _approx(a: Any, b: Any) -> None:
    """Equal, floats to 1e-5 (the same model call on another batch size may round apart)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (a, b)
        for k in a:
            _approx(a[k], b[k])
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), (a, b)
        for x, y in zip(a, b, strict=True):
            _approx(x, y)
    elif isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)
    else:
        assert a == b


def _same_table(a: pa.Table, b: pa.Table) -> None:
    ra, rb = a.to_pylist(), b.to_pylist()
    assert len(ra) == len(rb)
    for x, y in zip(ra, rb, strict=True):
        _same(x, y)


@pytest.mark.parametrize("case", list(CASES))
def test_stream_replay_and_offline_predict_agree_on_every_record(
        case: str, settings: Settings, conn: KafkaConnection, dfs: Path, data: str,
        stream: str, topic_factory: Callable[..., str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    publish, make = CASES[case]
    mv = publish(dfs, stream)
    table_rows = make(9)
    records: list[Any] = [_json_record(r) for r in table_rows[:6]]
    keys = [f"j{i}" for i in range(6)]
    items = [(k, json.dumps(r).encode(), hdr.JSON) for k, r in zip(keys, records, strict=True)]
    arrow = encode_arrow(pa.Table.from_pylist(table_rows[6:]))
    records.append(arrow)
    keys.append("arrow")
    items.append(("arrow", arrow, hdr.ARROW))
    if case.endswith("image"):  # a raw PNG message: the record is the image itself
        records.append(table_rows[0]["image"])
        keys.append("raw")
        items.append(("raw", table_rows[0]["image"], "image/png"))
    produce(conn, data, items)

    msgs, _ = score(settings, conn, expect=len(items))
    live: dict[str, Any] = {}
    for m in msgs:
        if hdr.get(m.headers(), hdr.CONTENT_TYPE) == hdr.ARROW:
            live[m.key().decode()] = decode_arrow(m.value())
        else:
            live[json.loads(m.value())["key"]] = json.loads(m.value())
    assert set(live) == set(keys)

    side = topic_factory(partitions=3)
    cp = replaying.plan(conn, source=data_topic(stream), into=side,
                        model=f"{stream}:{mv.version}")
    result = replaying.run(conn, dfs, cp)
    assert result.completed
    replayed: dict[str, Any] = {}
    for r in read_all(conn, side):
        key = (r.key or b"").decode()
        replayed[key] = decode_arrow(r.value) if key == "arrow" else json.loads(r.value or b"")
    assert set(replayed) == set(keys)

    offline = models.load(f"{stream}:{mv.version}", dfs_root=dfs).predict(records, keys=keys)
    assert len(offline) == len(records)
    for key, out in zip(keys, offline, strict=True):
        if key == "arrow":
            assert isinstance(out, pa.Table)
            _same_table(out, live[key])
            _same_table(replayed[key], live[key])
        else:
            assert isinstance(out, dict) and "error" not in out, out
            _same(out, live[key])
            _same(replayed[key], live[key])
            assert live[key]["model_version"] == mv.version
    if case.startswith("pt-"):  # and `headrace predict` itself, on the JSON records
        from headrace.cli import main

        path = tmp_path / "records.jsonl"
        path.write_text("".join(json.dumps({"key": k, **r}) + "\n"
                                for k, r in zip(keys[:6], records[:6], strict=True)))
        capsys.readouterr()  # only what predict prints
        assert main(["--dfs-root", str(dfs), "predict", f"{stream}:{mv.version}", str(path),
                     "--json"]) == 0
        printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [p["key"] for p in printed] == keys[:6]
        for p in printed:
            _same(p, live[p["key"]])


def test_headrace_predict_prints_the_streams_predictions_for_a_folder_and_a_file(
        dfs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from headrace.cli import main

    mv, _ = sm.tf_digits(dfs, "digits")
    folder = tmp_path / "imgs"
    folder.mkdir()
    pngs = [sm.encode(img) for img in sm.digits(4)]
    for i, png in enumerate(pngs):
        (folder / f"d{i}.png").write_bytes(png)
    jsonl = tmp_path / "recs.jsonl"
    jsonl.write_text("".join(json.dumps({"key": f"r{i}", "image": base64.b64encode(p).decode()})
                             + "\n" for i, p in enumerate(pngs)))
    want = models.load("digits", dfs_root=dfs).predict(pngs)

    assert main(["--dfs-root", str(dfs), "predict", "digits", str(folder), "--json"]) == 0
    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [g["key"] for g in got] == [f"d{i}.png" for i in range(4)]  # keyed by file name
    for g, w in zip(got, want, strict=True):
        assert isinstance(w, dict)
        _same({**g, "key": None}, w)

    assert main(["--dfs-root", str(dfs), "predict", f"digits:{mv.version}", str(jsonl)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split("\t")[:2] for ln in lines] == [
        [f"r{i}", w["label"]] for i, w in enumerate(want) if isinstance(w, dict)]

    assert main(["--dfs-root", str(dfs), "predict", "digits:99", str(jsonl)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "digits" in err[0] and "Traceback" not in err[0]
