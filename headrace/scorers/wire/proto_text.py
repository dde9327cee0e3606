"""``.proto`` text (proto2 / proto3) to a ``FileDescriptorProto``: what a Schema Registry stores
for a Protobuf schema. The ``protobuf`` runtime has no parser of its own (protoc does), so this
reads the part of the language that describes data: package, imports, messages (nested),
enums, fields with labels, ``oneof`` and ``map<K, V>``. Options, reserved ranges, extensions
and services are skipped; type names are resolved by the runtime's pool.
"""

from __future__ import annotations

import re
from typing import Any

_TOKEN = re.compile(r"""\s+|//[^\n]*|/\*.*?\*/|(?P<t>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|"""
                    r"""[A-Za-z_][\w.]*|\.[A-Za-z_][\w.]*|-?\d[\w.+-]*|[{}\[\]()<>;=,:.-])""",
                    re.S)
_SCALARS = {"double": 1, "float": 2, "int64": 3, "uint64": 4, "int32": 5, "fixed64": 6,
            "fixed32": 7, "bool": 8, "string": 9, "bytes": 12, "uint32": 13, "sfixed32": 15,
            "sfixed64": 16, "sint32": 17, "sint64": 18}
_LABELS = {"optional": 1, "required": 2, "repeated": 3}


class ProtoSyntaxError(ValueError):
    pass


class _Tokens:
    def __init__(self, text: str) -> None:
        self.items: list[str] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                raise ProtoSyntaxError(f"unexpected character {text[pos]!r} at {pos}")
            if m.group("t") is not None:
                self.items.append(m.group("t"))
            pos = m.end()
        self.i = 0

    def peek(self) -> str:
        return self.items[self.i] if self.i < len(self.items) else ""

    def next(self) -> str:
        if self.i >= len(self.items):
            raise ProtoSyntaxError("unexpected end of schema")
        self.i += 1
        return self.items[self.i - 1]

    def expect(self, tok: str) -> None:
        got = self.next()
        if got != tok:
            raise ProtoSyntaxError(f"expected {tok!r}, got {got!r}")

    def skip_statement(self) -> None:
        """To the end of the statement: its ``;`` or its balanced ``{ }`` block."""
        depth = 0
        while True:
            t = self.next()
            if t == "{":
                depth += 1
            elif t == "}":
                depth -= 1
                if depth == 0:
                    return
            elif t == ";" and depth == 0:
                return


def parse(text: str, name: str = "schema.proto") -> Any:
    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto(name=name)
    toks = _Tokens(text)
    proto3 = False
    while toks.peek():
        t = toks.next()
        if t == "syntax" or t == "edition":
            toks.expect("=")
            proto3 = toks.next().strip("'\"") == "proto3"
            fdp.syntax = "proto3" if proto3 else "proto2"
            toks.expect(";")
        elif t == "package":
            fdp.package = toks.next()
            toks.expect(";")
        elif t == "import":
            dep = toks.next()
            if dep in ("public", "weak"):
                dep = toks.next()
            fdp.dependency.append(dep.strip("'\""))
            toks.expect(";")
        elif t == "message":
            _message(toks, fdp.message_type.add(), proto3)
        elif t == "enum":
            _enum(toks, fdp.enum_type.add())
        elif t == ";":
            continue
        else:  # option, service, extend
            toks.skip_statement()
    return fdp


def _message(toks: _Tokens, msg: Any, proto3: bool) -> None:
    msg.name = toks.next()
    toks.expect("{")
    synthetic: list[Any] = []  # proto3 ``optional`` fields: their oneofs go after the real ones
    while (t := toks.peek()) != "}":
        if not t:
            raise ProtoSyntaxError(f"message {msg.name} is not closed")
        if t == "message":
            toks.next()
            _message(toks, msg.nested_type.add(), proto3)
        elif t == "enum":
            toks.next()
            _enum(toks, msg.enum_type.add())
        elif t == "oneof":
            toks.next()
            index = len(msg.oneof_decl)
            msg.oneof_decl.add(name=toks.next())
            toks.expect("{")
            while toks.peek() != "}":
                if toks.peek() == "option":
                    toks.skip_statement()
                    continue
                _field(toks, msg, proto3, oneof=index)
            toks.next()
        elif t in ("option", "reserved", "extensions", "extend"):
            toks.skip_statement()
        elif t == ";":
            toks.next()
        else:
            f = _field(toks, msg, proto3)
            if f is not None and proto3 and f.label == 1 and f.proto3_optional:
                synthetic.append(f)
    toks.next()
    for f in synthetic:
        f.oneof_index = len(msg.oneof_decl)
        msg.oneof_decl.add(name=f"_{f.name}")


def _field(toks: _Tokens, msg: Any, proto3: bool, oneof: int | None = None) -> Any:
    label = _LABELS.get(toks.peek())
    explicit_optional = label == 1
    if label is not None:
        toks.next()
    type_name = toks.next()
    if type_name == "map":
        _map_field(toks, msg)
        return None
    f = msg.field.add(name=toks.next(), label=label or 1)
    toks.expect("=")
    f.number = int(toks.next(), 0)
    if toks.peek() == "[":
        while toks.next() != "]":
            pass
    toks.expect(";")
    _set_type(f, type_name)
    f.json_name = _json_name(f.name)
    if oneof is not None:
        f.oneof_index = oneof
    elif proto3 and explicit_optional:  # proto3 presence: a synthetic oneof of its own
        f.proto3_optional = True
    return f


def _map_field(toks: _Tokens, msg: Any) -> None:
    toks.expect("<")
    key = toks.next()
    toks.expect(",")
    value = toks.next()
    toks.expect(">")
    name = toks.next()
    toks.expect("=")
    number = int(toks.next(), 0)
    if toks.peek() == "[":
        while toks.next() != "]":
            pass
    toks.expect(";")
    entry = msg.nested_type.add(name="".join(p[:1].upper() + p[1:] for p in name.split("_"))
                                + "Entry")
    entry.options.map_entry = True
    for n, (fname, tname) in enumerate((("key", key), ("value", value)), 1):
        ef = entry.field.add(name=fname, number=n, label=1, json_name=fname)
        _set_type(ef, tname)
    f = msg.field.add(name=name, number=number, label=3, json_name=_json_name(name))
    f.type = 11
    f.type_name = entry.name


def _set_type(f: Any, type_name: str) -> None:
    if type_name in _SCALARS:
        f.type = _SCALARS[type_name]
    else:
        f.type_name = type_name  # message or enum: the pool resolves it in scope


def _enum(toks: _Tokens, enum: Any) -> None:
    enum.name = toks.next()
    toks.expect("{")
    while (t := toks.peek()) != "}":
        if not t:
            raise ProtoSyntaxError(f"enum {enum.name} is not closed")
        if t in ("option", "reserved"):
            toks.skip_statement()
            continue
        if t == ";":
            toks.next()
            continue
        name = toks.next()
        toks.expect("=")
        number = int(toks.next(), 0)
        if toks.peek() == "[":
            while toks.next() != "]":
                pass
        toks.expect(";")
        enum.value.add(name=name, number=number)
    toks.next()


def _json_name(name: str) -> str:
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])
