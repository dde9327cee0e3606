"""JSON from bytes anyone could have written (a Kafka value, a header): bounded in size and in
nesting, so no record can crash or stall its reader.

``json.loads`` and ``msgspec`` recurse once per nesting level: ``[`` x 100,000 raises
``RecursionError`` (not a ``ValueError``, so a reader that catches only that dies on it, and
again after every restart on the same record), and with a raised recursion limit deep
recursion can overflow a thread's C stack. Here the size is checked first, then the depth by a
scan that does not recurse (counting brackets outside strings), and only then is the value
decoded; every refusal is one ``ValidationFailed`` whose message never quotes the bytes.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import numpy as np

from headrace.core.errors import ValidationFailed

MAX_JSON_BYTES = 1_000_000  # a control event, a label: far below; a data record has its own
MAX_JSON_DEPTH = 64  # Headrace's own events and labels nest a few levels

# A JSON string, escapes included (possessive: linear on any input, even an unclosed string).
_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = np.zeros(256, np.int8)
_STEP[list(b"[{")] = 1
_STEP[list(b"]}")] = -1


def nesting_depth(data: bytes) -> int:
    """How deep ``data``'s arrays and objects nest (brackets inside strings do not count);
    linear in its length, no recursion."""
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    return int(np.cumsum(_STEP[np.frombuffer(brackets, np.uint8)], dtype=np.int64).max())


def check_bounds(data: bytes, *, max_bytes: int = MAX_JSON_BYTES,
                 max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise ``ValidationFailed`` when ``data`` is over ``max_bytes`` or nests deeper than
    ``max_depth``."""
    if len(data) > max_bytes:
        raise ValidationFailed(f"a JSON value of {len(data)} bytes exceeds the limit of "
                               f"{max_bytes}")
    # Cheap first: a value with fewer brackets than the limit cannot nest deeper.
    if data.count(b"[") + data.count(b"{") > max_depth and nesting_depth(data) > max_depth:
        raise ValidationFailed(f"JSON nested deeper than {max_depth} levels")


def loads(data: bytes | bytearray | memoryview | str | None, *, max_bytes: int = MAX_JSON_BYTES,
          max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``data`` decoded as JSON, or ``ValidationFailed`` with the reason (too big, too deep,
    not UTF-8, not JSON, a tombstone); never any other exception."""
    if data is None:
        raise ValidationFailed("no value (a tombstone)")
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    check_bounds(raw, max_bytes=max_bytes, max_depth=max_depth)
    try:
        return msgspec.json.decode(raw)
    except UnicodeDecodeError as exc:
        raise ValidationFailed(f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    except msgspec.ValidationError as exc:  # a number out of range
        raise ValidationFailed(f"not JSON: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ValidationFailed(f"not JSON: {exc}" if raw.strip() else "an empty value"
                               ) from None
    except (RecursionError, ValueError) as exc:  # the scan above should have caught it
        raise ValidationFailed(f"not JSON: {type(exc).__name__}") from None
