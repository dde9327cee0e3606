"""`headrace send` of image folders and tensor/image/text Parquet, in every format, and
`headrace tail` showing images and tensors summarised, on the real broker."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from headrace.cli import main
from headrace.streams.clients import KafkaConnection
from headrace.streams.codecs import decode_arrow
from headrace.streams.summaries import summarise
from headrace.streams.tailing import tail
from tests.streams.test_send_and_tail import _new_stream


def _png(value: int, size: tuple[int, int] = (8, 8)) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full(size[::-1], value, np.uint8), "L").save(buf, format="PNG")
    return buf.getvalue()


def _jpeg(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.zeros((h, w, 3), np.uint8), "RGB").save(buf, format="JPEG")
    return buf.getvalue()


def _cli(broker: str, *args: str) -> int:
    return main(["--bootstrap", broker, *args])


@pytest.mark.parametrize("fmt", ["json", "raw", "arrow"])
def test_an_image_folder_is_sent_one_record_per_file(
        broker: str, conn: KafkaConnection, tmp_path: Path, fmt: str) -> None:
    stream = _new_stream(broker)
    folder = tmp_path / "imgs"
    folder.mkdir()
    files = {f"{i}.png": _png(i * 10) for i in range(5)}
    files["x.jpg"] = _jpeg(12, 7)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / "notes.txt").write_text("ignored")
    assert _cli(broker, "send", stream, str(folder), "--format", fmt) == 0
    got = list(tail(conn, f"data.{stream}", from_beginning=True,
                    max_messages=1 if fmt == "arrow" else 6, idle_timeout_s=10))
    if fmt == "arrow":
        (m,) = got
        table = decode_arrow(m.raw or b"")
        assert dict(zip(table.column("key").to_pylist(), table.column("image").to_pylist(),
                        strict=True)) == files
        return
    assert len(got) == 6
    for m in got:
        assert m.key is not None
        if fmt == "raw":
            assert m.raw == files[m.key]
            assert m.headers["content-type"] == ("image/jpeg" if m.key.endswith(".jpg")
                                                 else "image/png")
        else:
            assert base64.b64decode(m.value["image"]) == files[m.key]


def test_tensor_image_and_text_parquet_goes_out_as_json_and_tail_summarises_it(
        broker: str, conn: KafkaConnection, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    stream = _new_stream(broker)
    grid = np.arange(3 * 64, dtype=np.float32).reshape(3, 8, 8)
    tensor_type = pa.fixed_shape_tensor(pa.float32(), (8, 8))
    table = pa.table({
        "id": [0, 1, 2],
        "grid": pa.ExtensionArray.from_storage(
            tensor_type, pa.FixedSizeListArray.from_arrays(pa.array(grid.ravel()), 64)),
        "image": pa.array([_png(v) for v in (0, 100, 200)], pa.binary()),
        "text": ["good movie", "bad plot", "fine"],
    })
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    assert _cli(broker, "send", stream, str(path), "--key", "id") == 0
    got = {m.key: m for m in tail(conn, f"data.{stream}", from_beginning=True,
                                  max_messages=3, idle_timeout_s=10)}
    assert len(got) == 3
    v = got["1"].value
    assert np.array_equal(np.asarray(v["grid"], np.float32), grid[1])  # nested, not flat
    assert base64.b64decode(v["image"]) == _png(100) and v["text"] == "bad plot"

    capsys.readouterr()
    assert _cli(broker, "tail", f"data.{stream}", "--from-beginning", "--max", "3",
                "--json") == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.strip()]
    assert len(lines) == 3
    for line in lines:
        value = line["value"]
        assert value["grid"] == "<tensor float32 (8, 8)>"
        size = len(_png((0, 100, 200)[int(line["key"])]))
        assert value["image"] == f"<image/png 8x8 {size} B base64>"
        assert value["text"] in ("good movie", "bad plot", "fine")


def test_summaries_of_raw_images_and_small_lists() -> None:
    assert summarise(_jpeg(12, 7)) == f"<image/jpeg 12x7 {len(_jpeg(12, 7))} B>"
    assert summarise({"scores": [0.1, 0.9], "k": "v"}) == {"scores": [0.1, 0.9], "k": "v"}
    assert summarise([[1, 2, 3]] * 6) == "<tensor int64 (6, 3)>"
    assert summarise([[1, 2], [3]] * 9) == [[1, 2], [3]] * 9  # ragged: left as is
