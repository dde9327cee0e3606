"""Scoring models with a signature on the real broker: digits images from JSON base64, raw
PNG/JPEG bytes and Arrow binary (TensorFlow and MXNet), tensors, text, an image + numeric model
with two outputs, a dead letter per bad row naming its input, an Arrow decompression bomb, and a
swap between signatures. Predictions are checked against the model's own offline output."""

from __future__ import annotations

import base64
import json
import resource
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from headrace.contracts import Prediction, parse
from headrace.core.settings import Settings
from headrace.streams import dlq
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.codecs import decode_arrow, encode_arrow
from headrace.streams.topics import catalog, dlq_topic, predictions_topic
from tests.scorers import signature_models as sm
from tests.scorers.conftest import (
    eventually,
    publish_tf,
    read_topic,
    ready_scorer,
    rows,
    score,
)
from tests.scorers.test_model_swap import _announce

JSON = hdr.JSON.encode()


def produce(conn: KafkaConnection, topic: str, items: list[tuple[str, bytes, str]]) -> None:
    """(key, value, content-type) each, in order."""
    p = make_producer(conn)
    for key, value, ctype in items:
        p.produce(topic, value, key, headers=[(hdr.CONTENT_TYPE, ctype.encode())])
    assert p.flush(15) == 0


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def json_item(key: str, record: dict[str, Any]) -> tuple[str, bytes, str]:
    return key, json.dumps(record).encode(), hdr.JSON


def arrow_item(key: str, table: pa.Table) -> tuple[str, bytes, str]:
    return key, encode_arrow(table), hdr.ARROW


def split(msgs: list[Any]) -> tuple[dict[str, dict[str, Any]], dict[str, pa.Table]]:
    """JSON predictions by key, Arrow prediction tables by key."""
    js, ar = {}, {}
    for m in msgs:
        if hdr.get(m.headers(), hdr.CONTENT_TYPE) == hdr.ARROW:
            ar[m.key().decode()] = decode_arrow(m.value())
        else:
            rec = json.loads(m.value())
            parse(Prediction, m.value())  # the contract still reads it
            js[rec["key"]] = rec
    return js, ar


def dead_reasons(msgs: list[Any]) -> dict[str, str]:
    return {m.key().decode(): hdr.get(m.headers(), dlq.DLQ_ERROR_MESSAGE) or "" for m in msgs}


def test_digit_images_from_json_raw_png_jpeg_and_arrow_match_offline_predictions(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    mv, model = sm.tf_digits(dfs, stream)
    imgs = sm.digits(40)
    png = [sm.encode(i) for i in imgs]
    jpg = [sm.encode(i, "JPEG") for i in imgs]
    items = [json_item(f"j{i}", {"image": b64(png[i])}) for i in range(10)]
    items += [(f"p{i}", png[i], "image/png") for i in range(10, 20)]
    items += [(f"q{i}", jpg[i], "image/jpeg") for i in range(20, 30)]
    items.append(arrow_item("arrow", pa.table({"image": pa.array(png[30:], pa.binary())})))
    produce(conn, data, items)
    msgs, _ = score(settings, conn, expect=31, top_k=3)
    js, ar = split(msgs)
    assert len(js) == 30 and set(ar) == {"arrow"}
    seen = [png[i] for i in range(20)] + [jpg[i] for i in range(20, 30)] + png[30:]
    expect = np.asarray(model(np.stack([sm.decoded(b) for b in seen])), np.float32)
    keys = ([f"j{i}" for i in range(10)] + [f"p{i}" for i in range(10, 20)]
            + [f"q{i}" for i in range(20, 30)])
    for k, want in zip(keys, expect[:30], strict=True):
        p = js[k]
        assert p["model_version"] == mv.version and p["source_topic"] == data
        np.testing.assert_allclose(p["scores"], want, rtol=1e-5, atol=1e-6)
        assert p["label"] == sm.DIGITS[int(np.argmax(want))]
        assert [t["label"] for t in p["top_k"]] == [sm.DIGITS[j] for j in np.argsort(-want)[:3]]
    table = ar["arrow"]
    assert table.column("row").to_pylist() == list(range(10))
    np.testing.assert_allclose(np.asarray(table.column("scores").to_pylist()), expect[30:],
                               rtol=1e-5, atol=1e-6)
    assert table.column("label").to_pylist() == [sm.DIGITS[j] for j in expect[30:].argmax(1)]


def test_mxnet_digit_images_from_json_and_raw_bytes_match_offline_predictions(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    mv, net = sm.mx_digits(dfs, stream)  # sets numpy.bool, which MXNet needs, first
    import mxnet as mx

    png = [sm.encode(i) for i in sm.digits(12)]
    items = [json_item(f"j{i}", {"image": b64(png[i])}) for i in range(6)]
    items += [(f"p{i}", png[i], "image/png") for i in range(6, 12)]
    items.append(json_item("bad", {"image": b64(b"GIF89a not a png")}))
    produce(conn, data, items)
    msgs, dead = score(settings, conn, expect=12, dead=1)
    js, _ = split(msgs)
    x = np.stack([sm.decoded(b) for b in png])
    expect = net(mx.nd.array(x)).asnumpy()
    for i in range(12):
        p = js[f"j{i}" if i < 6 else f"p{i}"]
        assert p["model_version"] == mv.version
        np.testing.assert_allclose(p["scores"], expect[i], rtol=1e-4, atol=1e-6)
    assert len(dead) == 1 and "input 'image': undecodable image" in dead_reasons(dead)["bad"]


def _bomb(rows_: int) -> bytes:
    """A zstd Arrow stream of float32 zeros: ~KB on the wire, 4 x rows_ bytes decompressed
    (np.zeros is calloc'd: building it touches no page)."""
    table = pa.table({"grid": pa.array(np.zeros(rows_, np.float32))})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema,
                           options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def test_tensors_from_json_and_fixed_size_lists_bad_rows_and_a_bomb_go_to_the_dlq(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    mv, model = sm.tf_tensor(dfs, stream)
    x = np.random.default_rng(0).normal(size=(20, 4, 3)).astype(np.float32)
    fsl = pa.FixedSizeListArray.from_arrays(
        pa.FixedSizeListArray.from_arrays(pa.array(x[10:].ravel()), 3), 4)
    bomb = _bomb(1 << 29)  # 2 GiB once decompressed, over the default 256 MiB limit
    assert len(bomb) < 1 << 20
    items = [json_item(f"j{i}", {"grid": x[i].tolist()}) for i in range(5)]
    items += [json_item("shape", {"grid": np.ones((3, 3)).tolist()}),
              json_item("dtype", {"grid": [["a", "b", "c"]] * 4}),
              json_item("missing", {"other": 1}),
              ("bomb", bomb, hdr.ARROW)]
    items += [json_item(f"j{i}", {"grid": x[i].tolist()}) for i in range(5, 10)]
    items.append(arrow_item("arrow", pa.table({"grid": fsl})))
    produce(conn, data, items)
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    msgs, dead = score(settings, conn, expect=11, dead=4)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) / 1024
    assert grown_mib < 256, f"peak RSS grew by {grown_mib:.0f} MiB"
    js, ar = split(msgs)
    expect = np.asarray(model(x), np.float32)
    for i in range(10):
        np.testing.assert_allclose(js[f"j{i}"]["scores"], expect[i], rtol=1e-5, atol=1e-6)
        assert js[f"j{i}"]["model_version"] == mv.version
    np.testing.assert_allclose(np.asarray(ar["arrow"].column("scores").to_pylist()),
                               expect[10:], rtol=1e-5, atol=1e-6)
    why = dead_reasons(dead)
    assert len(dead) == 4 and set(why) == {"shape", "dtype", "missing", "bomb"}
    assert "input 'grid': wrong tensor shape" in why["shape"]
    assert "input 'grid': wrong tensor dtype" in why["dtype"]
    assert why["missing"] == "input 'grid' is missing"
    assert "decompresses to 2147483648 bytes, over the limit of 268435456" in why["bomb"]


def test_text_records_from_json_and_arrow_strings_and_text_over_length(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str) -> None:
    import tensorflow as tf

    stream = settings.streams[0]
    ensure_topics(conn, catalog(settings))
    _, model = sm.tf_text(dfs, stream)
    texts = ["good movie", "awful plot", "the movie was fine", "great great great", "bad"]
    items = [json_item(f"j{i}", {"text": t}) for i, t in enumerate(texts)]
    items.append(json_item("long", {"text": "good " * 9}))
    items.append(arrow_item("arrow", pa.table({"text": texts})))
    produce(conn, data, items)
    msgs, dead = score(settings, conn, expect=6, dead=1)
    js, ar = split(msgs)
    expect = np.asarray(model(tf.constant([[t] for t in texts])), np.float32)
    for i in range(len(texts)):
        np.testing.assert_allclose(js[f"j{i}"]["scores"], expect[i], rtol=1e-5, atol=1e-6)
        assert js[f"j{i}"]["label"] in ("neg", "neutral", "pos")
    np.testing.assert_allclose(np.asarray(ar["arrow"].column("scores").to_pylist()), expect,
                               rtol=1e-5, atol=1e-6)
    assert dead_reasons(dead) == {"long": "input 'text': text of 9 tokens is over the "
                                          "model's 8"}


def test_an_image_plus_numeric_model_gives_top_k_and_both_outputs_and_bad_rows_their_reason(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    _, model = sm.tf_two_inputs(dfs, stream)
    imgs = sm.digits(8)
    png = [sm.encode(i) for i in imgs]
    meta = np.random.default_rng(1).normal(size=(8, 2)).astype(np.float32)
    items = [json_item(f"j{i}", {"image": b64(png[i]), "age": float(meta[i, 0]),
                                 "size": float(meta[i, 1])}) for i in range(4)]
    items += [json_item("noage", {"image": b64(png[0]), "size": 1.0}),
              json_item("huge", {"image": b64(sm.encode(np.zeros((40, 40), np.uint8))),
                                 "age": 1, "size": 1}),
              json_item("garbage", {"image": b64(b"\x89PNG\r\n\x1a\n...."), "age": 1,
                                    "size": 1})]
    items.append(arrow_item("arrow", pa.table({
        "image": pa.array(png[4:], pa.binary()), "age": meta[4:, 0], "size": meta[4:, 1]})))
    produce(conn, data, items)
    msgs, dead = score(settings, conn, expect=5, dead=3, max_image_pixels=1000)
    js, ar = split(msgs)
    kind, weight = (np.asarray(y, np.float32) for y in model(
        {"image": imgs[..., None].astype(np.float32), "meta": meta}))
    for i in range(4):
        p = js[f"j{i}"]
        np.testing.assert_allclose(p["scores"], kind[i], rtol=1e-5, atol=1e-6)
        assert len(p["top_k"]) == 5  # 12 classes: top-5 by default
        assert p["top_k"][0]["label"] == p["label"] == sm.TWELVE[int(kind[i].argmax())]
        np.testing.assert_allclose(p["outputs"]["weight"]["scores"], weight[i], rtol=1e-4,
                                   atol=1e-5)
        assert p["outputs"]["kind"]["label"] == p["label"]
    t = ar["arrow"]
    np.testing.assert_allclose(np.asarray(t.column("scores").to_pylist()), kind[4:], rtol=1e-5,
                               atol=1e-6)
    outs = [json.loads(s) for s in t.column("outputs").to_pylist()]
    np.testing.assert_allclose([o["weight"]["scores"] for o in outs], weight[4:], rtol=1e-4,
                               atol=1e-5)
    why = dead_reasons(dead)
    assert why["noage"] == "input 'meta': field 'age' is missing"
    assert "input 'image': image of 40x40 pixels is over the limit of 1000" in why["huge"]
    assert "input 'image': undecodable image" in why["garbage"]


def test_a_swap_from_a_tabular_model_to_an_image_model_scores_the_new_inputs(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    v1 = publish_tf(dfs, stream)
    png = [sm.encode(i) for i in sm.digits(5)]
    with ready_scorer(settings, conn) as scorer:
        produce(conn, data, [json_item(f"a{i}", r) for i, r in enumerate(rows(20))])
        read_topic(conn, predictions_topic(stream), expect=20, settle_s=0)
        v2, model = sm.tf_digits(dfs, stream)  # moves the production alias
        _announce(conn, stream, v2, previous=v1.version)
        eventually(lambda: scorer.holder.current is not None
                 and scorer.holder.current.version == v2.version, what="swap to v2")
        produce(conn, data, [(f"b{i}", png[i], "image/png") for i in range(5)]
                + [json_item("tabular", rows(1)[0])])
        msgs = read_topic(conn, predictions_topic(stream), expect=25)
        dead = read_topic(conn, dlq_topic(stream), expect=1)
    js, _ = split(msgs)
    assert {js[f"a{i}"]["model_version"] for i in range(20)} == {v1.version}
    expect = np.asarray(model(np.stack([sm.decoded(b) for b in png])), np.float32)
    for i in range(5):
        assert js[f"b{i}"]["model_version"] == v2.version
        np.testing.assert_allclose(js[f"b{i}"]["scores"], expect[i], rtol=1e-5, atol=1e-6)
    assert dead_reasons(dead) == {"tabular": "input 'image' is missing"}


def test_mxnet_text_plus_numeric_model_with_two_outputs(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    mv, net = sm.mx_text_and_meta(dfs, stream)  # sets numpy.bool, which MXNet needs, first
    import mxnet as mx

    from headrace.store import tokens

    texts = ["good movie", "the plot was awful", "fine fine", "unknown words here"]
    meta = np.random.default_rng(2).normal(size=(4, 2)).astype(np.float32)
    items = [json_item(f"j{i}", {"review": t, "age": float(meta[i, 0]),
                                 "size": float(meta[i, 1])}) for i, t in enumerate(texts)]
    items.append(json_item("long", {"review": "good " * 7, "age": 1, "size": 1}))
    produce(conn, data, items)
    msgs, dead = score(settings, conn, expect=4, dead=1)
    js, _ = split(msgs)
    ids = tokens.encode_text(pa.array(texts), sm.VOCAB, max_length=6).astype(np.float32)
    cls, reg = (y.asnumpy() for y in net(mx.nd.array(ids), mx.nd.array(meta)))
    for i in range(4):
        p = js[f"j{i}"]
        assert p["model_version"] == mv.version
        np.testing.assert_allclose(p["scores"], cls[i], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(p["outputs"]["stars"]["scores"], reg[i], rtol=1e-4,
                                   atol=1e-5)
    assert dead_reasons(dead) == {"long": "input 'review': text of 7 tokens is over the "
                                          "model's 6"}
