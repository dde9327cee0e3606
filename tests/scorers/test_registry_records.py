"""Schema Registry wire-format records decoded a batch at a time, without a broker: Avro bodies
from fastavro's writer, Protobuf from the runtime, JSON Schema bodies; schemas given directly."""

from __future__ import annotations

import datetime as dt
import json
import random
from decimal import Decimal
from typing import Any

import numpy as np
import pytest

from headrace.core.errors import RetriableError
from headrace.scorers.engine.core import ScoringCore
from headrace.scorers.wire import avro_columns, protobuf_columns
from headrace.scorers.wire.decoding import decode
from headrace.scorers.wire.inputs import InputLimits, decode_inputs
from headrace.scorers.wire.refusals import input_ref
from headrace.scorers.wire.registry_records import REGISTRY_STAGE, RegistryRecords
from headrace.store.signature import InputKind, ModelInput
from headrace.streams import dlq
from headrace.streams import headers as hdr
from headrace.streams.codecs import encode_arrow
from headrace.streams.dlq import DeadLetter
from tests.scorers.registry_helpers import Schemas, avro_body, batch, frame

READING = {"type": "record", "name": "Reading", "namespace": "acme", "fields": [
    {"name": "x", "type": "double"},
    {"name": "count", "type": "long"},
    {"name": "ratio", "type": ["null", "float"], "default": None},
    {"name": "on", "type": "boolean"},
    {"name": "label", "type": "string"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "loc", "type": {"type": "record", "name": "Loc", "fields": [
        {"name": "lat", "type": "double"},
        {"name": "alt", "type": ["null", "int"], "default": None}]}},
]}
UTC = dt.UTC


def _reading(i: int, rng: random.Random) -> dict[str, Any]:
    return {"x": rng.uniform(-1e6, 1e6), "count": rng.randint(-2**62, 2**62),
            "ratio": None if i % 3 == 0 else float(np.float32(rng.random())),
            "on": i % 2 == 0, "label": "é" * (i % 5), "kind": "ABC"[i % 3],
            "at": dt.datetime(2026, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=i),
            "day": dt.date(1970, 1, 1) + dt.timedelta(days=i),
            "loc": {"lat": i / 7, "alt": None if i % 4 == 0 else -i}}


def test_the_vectorised_avro_reader_gives_what_fastavro_reads() -> None:
    rng = random.Random(3)
    records = [_reading(i, rng) for i in range(500)]
    bodies = [avro_body(READING, r) for r in records]
    compiled = avro_columns.compile_schema(json.dumps(READING))
    assert compiled.vectorised
    assert "loc" not in compiled.fields and "loc.alt" in compiled.fields
    wanted = list(compiled.fields)
    cols, errors = compiled.columns(bodies, wanted)
    assert not errors
    slow, slow_errors = avro_columns._per_record(compiled._parsed, bodies, wanted)
    assert not slow_errors
    for f in wanted:
        assert cols[f].to_pylist() == slow[f].to_pylist(), f
    got = {f: cols[f].to_pylist() for f in wanted}
    assert got["x"] == [r["x"] for r in records]
    assert got["count"] == [r["count"] for r in records]
    assert got["ratio"] == [r["ratio"] for r in records]  # null stays null
    assert got["kind"] == [r["kind"] for r in records]  # enums are their symbols
    assert got["label"][:3] == ["", "é", "éé"]
    # Logical types keep their Avro number: epoch milliseconds, days since the epoch.
    assert got["at"][:2] == [1767225600000, 1767225600001]
    assert got["day"][:3] == [0, 1, 2]
    assert got["loc.alt"][:5] == [None, -1, -2, -3, None]


def test_arrays_maps_decimals_and_unions_go_through_fastavro() -> None:
    schema = {"type": "record", "name": "Basket", "fields": [
        {"name": "items", "type": {"type": "array", "items": "float"}},
        {"name": "tags", "type": {"type": "map", "values": "string"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                                   "scale": 2}},
        {"name": "either", "type": ["null", "long", "string"]},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}}]}
    records = [{"items": [1.0, 2.5], "tags": {"a": "b"}, "price": Decimal("12.34"),
                "either": 4, "at": dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)},
               {"items": [], "tags": {}, "price": Decimal("-0.05"), "either": None, "at": 0}]
    compiled = avro_columns.compile_schema(json.dumps(schema))
    assert not compiled.vectorised
    cols, errors = compiled.columns([avro_body(schema, r) for r in records] + [b"\x02"],
                                    ["items", "price", "either", "at"])
    assert cols["items"].to_pylist() == [[1.0, 2.5], [], None]
    assert cols["price"].to_pylist() == [12.34, -0.05, None]  # decimal: a float
    assert cols["either"].to_pylist() == [4, None, None]
    assert cols["at"].to_pylist() == [1_000_000, 0, None]  # epoch microseconds
    assert list(errors) == [2] and "does not decode" in errors[2]


FEATURES = ("x", "loc.lat", "ratio")


def test_a_writer_schema_that_evolves_is_read_by_each_id_in_one_batch() -> None:
    v1 = READING
    # v2: a new field with a default, a new nested record; v3: two fields removed; v4: the
    # nested record the model reads removed.
    v2: dict[str, Any] = {**READING, "fields": [*READING["fields"],
                                {"name": "extra", "type": "int", "default": 0},
                                {"name": "meta", "type": ["null", {
                                    "type": "record", "name": "Meta", "fields": [
                                        {"name": "src", "type": "string"}]}], "default": None}]}
    v3 = {**v2, "fields": [f for f in v2["fields"] if f["name"] not in ("label", "on")]}
    v4 = {**v3, "fields": [f for f in v3["fields"] if f["name"] != "loc"]}  # lacks loc.lat
    schemas = Schemas({1: ("AVRO", v1), 2: ("AVRO", v2), 3: ("AVRO", v3), 4: ("AVRO", v4)})
    rng = random.Random(5)
    base = [_reading(i, rng) for i in range(8)]
    values = [
        frame(1, avro_body(v1, base[0])),
        frame(2, avro_body(v2, {**base[1], "extra": 3, "meta": {"src": "s"}})),
        json.dumps({"x": 1.0, "loc.lat": 2.0, "ratio": 0.5}).encode(),  # JSON beside them
        frame(3, avro_body(v3, base[3])),
        frame(4, avro_body(v4, {k: v for k, v in base[4].items() if k != "loc"})),
        frame(1, avro_body(v1, base[5])),
        encode_arrow(__import__("pyarrow").table({"x": [9.0], "loc.lat": [8.0],
                                                  "ratio": [7.0]})),
        frame(2, avro_body(v2, {**base[7], "ratio": 0.25})),
    ]
    registry = RegistryRecords(schemas)
    feats = decode(batch(values), FEATURES, registry=registry)
    # Every id by its own writer schema; rows in message order, whatever their format.
    assert feats.message.tolist() == [1, 2, 5, 6, 7]
    want = [[base[1]["x"], base[1]["loc"]["lat"], base[1]["ratio"]], [1.0, 2.0, 0.5],
            [base[5]["x"], base[5]["loc"]["lat"], base[5]["ratio"]], [9.0, 8.0, 7.0],
            [base[7]["x"], base[7]["loc"]["lat"], 0.25]]
    np.testing.assert_allclose(feats.x, np.asarray(want, np.float32))
    reasons = {b.message: b for b in feats.bad}
    # ratio null (records 0 and 3: i % 3 == 0) is missing, as a JSON null is; v4 lacks loc.lat.
    assert sorted(reasons) == [0, 3, 4]
    assert "'ratio' is missing, null or not finite" in str(reasons[0].error)
    assert "schema id 4 has no field(s) ['loc.lat']" in str(reasons[4].error)
    assert [getattr(reasons[m].error, "schema_id", None) for m in (0, 3, 4)] == [1, 3, 4]
    assert sorted(set(schemas.fetches)) == [1, 2, 3, 4]
    decode(batch(values), FEATURES, registry=registry)
    assert len(schemas.fetches) == 4  # fetched once per id, then cached


def test_each_failure_is_a_dead_letter_with_its_reason_and_schema_id() -> None:
    good = frame(1, avro_body(READING, _reading(1, random.Random(1))))
    schemas = Schemas({1: ("AVRO", READING), 5: ("AVRO", "{not json"),
                       6: ("AVRO", {"type": "record", "name": "Other", "fields": [
                           {"name": "x", "type": "string"}, {"name": "loc", "type": {
                               "type": "record", "name": "L", "fields": [
                                   {"name": "lat", "type": "double"}]}},
                           {"name": "ratio", "type": "float"}]}),
                       7: ("XML", "<a/>")})
    values = [
        good,
        frame(99, b"\x02"),  # an id the registry does not know
        b"\x00\x00\x01",  # shorter than the header
        good[:-3],  # a body cut short
        frame(1, avro_body(READING, _reading(2, random.Random(2))) + b"\x00"),  # bytes left
        frame(5, b"\x00"),  # a schema that is not Avro
        frame(6, avro_body(json.loads(schemas.schemas[6].schema_str),
                           {"x": "text", "loc": {"lat": 1.0}, "ratio": 1.0})),
        frame(7, b"<a/>"),  # a schema type the scorer does not read
        b"\x05\x00\x00\x00\x01abc",  # no input the scorer knows: a wrong magic byte
        good,
    ]
    b = batch(values)
    feats = decode(b, FEATURES, registry=RegistryRecords(schemas))
    assert feats.message.tolist() == [0, 9]
    got = {x.message: x for x in feats.bad}
    assert sorted(got) == list(range(1, 9))
    why = {m: str(x.error) for m, x in got.items()}
    assert "schema id 99 is unknown to the registry" in why[1]
    assert "shorter than its 5-byte header" in why[2]
    assert "does not decode as its Avro schema says" in why[3]
    assert "does not decode as its Avro schema says" in why[4]
    assert "schema id 5 cannot be read: not an Avro schema" in why[5]
    assert "schema id 6" in why[6] and "non-numeric" in why[6]
    assert "schema type 'XML'" in why[7]
    assert "first byte 0x05" in why[8] and "magic byte is 0x00" in why[8]
    letters = [DeadLetter.from_error(input_ref(b, x.message), x.error, stage=x.stage)
               for x in feats.bad]
    ids = {x.record.offset: hdr.to_dict(x.headers()).get(dlq.DLQ_SCHEMA_ID) for x in letters}
    assert ids == {1: "99", 2: None, 3: "1", 4: "1", 5: "5", 6: "6", 7: "7", 8: None}


def test_without_a_registry_a_wire_record_is_refused_saying_so() -> None:
    feats = decode(batch([frame(1, b"\x02")]), FEATURES)
    assert "no registry (HEADRACE_SCHEMA_REGISTRY_URL)" in str(feats.bad[0].error)


def test_a_registry_that_cannot_answer_is_retriable_and_nothing_is_refused() -> None:
    schemas = Schemas({1: ("AVRO", READING)})
    schemas.down.set()
    registry = RegistryRecords(schemas)
    values = [frame(1, avro_body(READING, _reading(1, random.Random(1))))]
    with pytest.raises(RetriableError) as caught:
        decode(batch(values), FEATURES, registry=registry)
    assert caught.value.stage == REGISTRY_STAGE and "schema id 1" in str(caught.value)
    schemas.down.clear()  # back: the same batch decodes
    feats = decode(batch(values), FEATURES, registry=registry)
    assert feats.num_rows == 1 and not feats.bad


PROTO = """
syntax = "proto3";
package acme.v1;
message Reading {
  double x = 1;
  optional float ratio = 2;
  Kind kind = 3;
  Loc loc = 4;
  repeated int64 tags = 5;
  map<string, int32> labels = 6;
  enum Kind { K0 = 0; K1 = 1; }
  message Loc { double lat = 1; optional int32 alt = 2; }
}
"""


def test_protobuf_bodies_by_a_message_class_built_from_the_schema() -> None:
    compiled = protobuf_columns.compile_schema(PROTO)
    assert set(compiled.fields) == {"x", "ratio", "kind", "loc.lat", "loc.alt", "tags"}
    cls = compiled._classes[(0,)]
    one = cls(x=1.5, ratio=0.5, kind=1, loc={"lat": 2.0, "alt": 3}, tags=[1, 2])
    one.labels["a"] = 1
    two = cls(x=-1.0, loc={"lat": 4.0})
    values = [frame(3, b"\x00" + one.SerializeToString()),
              frame(3, b"\x02\x00" + two.SerializeToString()),  # indexes [0], spelled out
              frame(3, b"\x00\xff\xff\xff"),
              frame(3, b"\x02\x02" + two.SerializeToString())]  # message 1: none such
    registry = RegistryRecords(Schemas({3: ("PROTOBUF", PROTO)}))
    sig = (ModelInput(name="features", kind=InputKind.NUMERIC, columns=("x", "loc.lat")),
           ModelInput(name="kind", kind=InputKind.CATEGORY, dtype="string"))
    got = decode_inputs(batch(values), sig, InputLimits(registry=registry))
    assert got.message.tolist() == [0, 1]
    np.testing.assert_allclose(got.arrays["features"], [[1.5, 2.0], [-1.0, 4.0]])
    assert got.arrays["kind"].tolist() == ["K1", "K0"]  # enums by name
    assert sorted(b.message for b in got.bad) == [2, 3]
    assert all(getattr(b.error, "schema_id", None) == 3 for b in got.bad)
    cols, _ = compiled.columns([b"\x00" + one.SerializeToString(),
                                b"\x00" + two.SerializeToString()],
                               ["ratio", "loc.alt", "tags"])
    # Presence: an absent optional field is null; repeated scalars are lists.
    assert cols["ratio"].to_pylist() == [0.5, None]
    assert cols["loc.alt"].to_pylist() == [3, None]
    assert cols["tags"].to_pylist() == [[1, 2], []]


def test_json_schema_bodies_are_read_as_json_records() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "number"}}}
    closed = {**schema, "additionalProperties": False}
    registry = RegistryRecords(Schemas({8: ("JSON", schema), 9: ("JSON", closed)}))
    values = [frame(8, b'{"x": 1, "loc.lat": 2, "ratio": 3}'),
              frame(8, b'{"x": 1}'),
              frame(8, b"{not json"),
              frame(9, b'{"x": 1}')]
    feats = decode(batch(values), FEATURES, registry=registry)
    assert feats.message.tolist() == [0]
    np.testing.assert_allclose(feats.x, [[1, 2, 3]])
    why = {b.message: str(b.error) for b in feats.bad}
    assert "schema id 8" in why[1] and "loc.lat" in why[1]
    assert "schema id 8: undecodable JSON record" in why[2]
    assert "schema id 9 has no field(s) ['loc.lat', 'ratio']" in why[3]


def test_a_signature_model_reads_nested_fields_and_enums_by_path() -> None:
    rng = random.Random(9)
    records = [_reading(i, rng) for i in range(6)]
    registry = RegistryRecords(Schemas({1: ("AVRO", READING)}))
    sig = (ModelInput(name="features", kind=InputKind.NUMERIC, columns=("x", "loc.lat")),
           ModelInput(name="kind", kind=InputKind.CATEGORY, dtype="string"))
    values = [frame(1, avro_body(READING, r)) for r in records]
    values.insert(2, json.dumps({"x": 0.5, "loc.lat": 1.5, "kind": "Z"}).encode())
    got = decode_inputs(batch(values), sig, InputLimits(registry=registry))
    assert got.message.tolist() == list(range(7)) and not got.bad
    assert got.arrays["kind"].tolist() == ["A", "B", "Z", "C", "A", "B", "C"]
    np.testing.assert_allclose(got.arrays["features"][3],
                               [records[2]["x"], records[2]["loc"]["lat"]], rtol=1e-6)


def test_the_scoring_core_puts_the_schema_id_in_the_dead_letter() -> None:
    registry = RegistryRecords(Schemas({}))
    core = ScoringCore(limits=InputLimits(registry=registry))
    b = batch([frame(42, b"\x02")])
    feats = decode(b, ("x",), registry=core.limits.registry)
    letter = core._letter(b, feats, feats.bad[0])
    h = hdr.to_dict(letter.headers())
    assert h[dlq.DLQ_SCHEMA_ID] == "42" and h[dlq.DLQ_STAGE] == "decode"
    assert "schema id 42 is unknown" in h[dlq.DLQ_ERROR_MESSAGE]


def test_fixed_width_records_read_in_place_as_when_gathered() -> None:
    schema = {"type": "record", "name": "Flat", "fields": [
        {"name": "a", "type": "float"}, {"name": "b", "type": "double"},
        {"name": "c", "type": "float"}]}
    compiled = avro_columns.compile_schema(json.dumps(schema))
    rng = np.random.default_rng(2)
    recs = [{"a": float(np.float32(v)), "b": float(w), "c": -1.0}
            for v, w in rng.normal(size=(50, 2))]
    bodies = [avro_body(schema, r) for r in recs]
    assert len({len(b) for b in bodies}) == 1  # equally spaced: read as strided views
    cols, errors = compiled.columns([b"hdr" + b for b in bodies], ["a", "b", "c"], skip=3)
    assert not errors and cols["b"].to_pylist() == [r["b"] for r in recs]
    # One body cut short: the rows are no longer equally spaced, so they are gathered.
    bodies[7] = bodies[7][:-1]
    cols, errors = compiled.columns(bodies, ["a", "b", "c"])
    assert list(errors) == [7]
    want: list[float | None] = [r["a"] for r in recs]
    want[7] = None
    assert cols["a"].to_pylist() == want


FIXED = """
syntax = "proto3";
message Point { float a = 1; double b = 2; optional fixed32 c = 3; sfixed64 d = 4; }
"""


def test_protobuf_records_of_one_layout_are_read_in_place_as_the_runtime_reads_them() -> None:
    compiled = protobuf_columns.compile_schema(FIXED)
    assert compiled.vectorised
    cls = compiled._classes[(0,)]
    rng = np.random.default_rng(4)
    msgs = [cls(a=float(np.float32(v)), b=float(w), c=7, d=-int(k))
            for (v, w), k in zip(rng.normal(size=(40, 2)), range(1, 41), strict=True)]
    values = [frame(2, b"\x00" + m.SerializeToString()) for m in msgs]
    wanted = ["a", "b", "c", "d"]
    fast, errors = compiled.columns(values, wanted, 5)
    assert not errors
    other = frame(2, b"\x02\x00" + msgs[0].SerializeToString())  # indexes [0] spelled out
    slow, _ = compiled.columns([other, *values], wanted, 5)  # not one layout: the runtime
    for f in wanted:
        assert fast[f].to_pylist() == slow[f].to_pylist()[1:], f
    assert fast["d"].to_pylist()[:3] == [-1, -2, -3]
    # c left out of some records (no presence bit set): not one layout, so the runtime reads
    # them, and the absent optional field is null.
    msgs[3].ClearField("c")
    values[3] = frame(2, b"\x00" + msgs[3].SerializeToString())
    mixed, errors = compiled.columns(values, wanted, 5)
    assert not errors and mixed["c"].to_pylist()[2:5] == [7, None, 7]
    assert mixed["a"].to_pylist() == fast["a"].to_pylist()


def test_an_avro_array_feeds_a_tensor_input_and_a_wrong_length_is_refused() -> None:
    schema = {"type": "record", "name": "T", "fields": [
        {"name": "v", "type": {"type": "array", "items": "float"}},
        {"name": "k", "type": {"type": "enum", "name": "E", "symbols": ["a", "b"]}}]}
    registry = RegistryRecords(Schemas({1: ("AVRO", schema)}))
    sig = (ModelInput(name="v", kind=InputKind.TENSOR, dtype="float32", shape=(3,)),
           ModelInput(name="k", kind=InputKind.CATEGORY, dtype="string"))
    values = [frame(1, avro_body(schema, {"v": [1, 2, 3], "k": "b"})),
              frame(1, avro_body(schema, {"v": [1, 2], "k": "a"}))]
    got = decode_inputs(batch(values), sig, InputLimits(registry=registry))
    np.testing.assert_array_equal(got.arrays["v"], [[1, 2, 3]])
    assert got.arrays["k"].tolist() == ["b"]
    assert [(b.message, str(b.error)) for b in got.bad] == [
        (1, "schema id 1: input 'v': wrong tensor shape, the model takes (3,)")]


def test_a_decoder_that_breaks_refuses_its_group_and_the_batch_goes_on() -> None:
    class Broken:
        fields = ("x", "loc.lat", "ratio")

        def columns(self, values: Any, wanted: Any, skip: int = 0) -> Any:
            raise IndexError("a bug, not the data")

    registry = RegistryRecords(Schemas({1: ("AVRO", READING)}))
    registry._decoders[9] = Broken()
    good = frame(1, avro_body(READING, {**_reading(1, random.Random(1)), "ratio": 0.5}))
    feats = decode(batch([frame(9, b"\x01"), good]), FEATURES, registry=registry)
    assert feats.message.tolist() == [1]
    assert "schema id 9: the records could not be decoded: IndexError" in str(
        feats.bad[0].error)
