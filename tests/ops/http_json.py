"""The dashboard's JSON over HTTP, as a browser's fetch gets it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def get(url: str) -> tuple[int, Any]:
    """(status, parsed body), error statuses included."""
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def get_ok(url: str) -> Any:
    """The parsed body of a 200 (anything else fails the test)."""
    status, body = get(url)
    assert status == 200, (status, body)
    return body
