"""Every stream there is, not only the configured ones: the configured streams, the broker's
``data.<stream>`` topics, the streams the DFS keeps dead-letter ledgers for, and the streams
the scorers report in their metrics. Each with where it was seen, so the page can say why a
stream is listed (e.g. "scorer only: its topic is gone")."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from headrace.core.errors import ValidationFailed
from headrace.core.naming import check_name


def streams_in_topics(topics: Iterable[str]) -> set[str]:
    """``data.<stream>`` topics (not their ``.dlq``) -> stream names."""
    return {t[len("data."):] for t in topics
            if t.startswith("data.") and not t.endswith(".dlq") and _valid(t[len("data."):])}


def streams_on_dfs(root: Path) -> set[str]:
    """Streams with a dead-letter ledger (``ops/dlq/<stream>/``)."""
    base = root / "ops" / "dlq"
    try:
        return {d.name for d in base.iterdir() if d.is_dir() and _valid(d.name)}
    except OSError:
        return set()


def _valid(name: str) -> bool:
    try:
        check_name(name, what="stream name")
    except ValidationFailed:
        return False
    return True


def all_streams(*, configured: Iterable[str], topics: Iterable[str] | None,
                dfs: Iterable[str], scorers: Iterable[str]) -> list[dict[str, Any]]:
    """[{name, seen_in: [configured, topic, dfs, scorer]}] sorted by name.

    ``topics`` None: the broker could not be asked (no Kafka, or it is down).
    """
    seen: dict[str, list[str]] = {}
    for where, names in (("configured", configured), ("topic", streams_in_topics(topics or ())),
                         ("dfs", dfs), ("scorer", scorers)):
        for n in names:
            if where not in seen.setdefault(n, []):
                seen[n].append(where)
    return [{"name": n, "seen_in": seen[n], "has_topic": "topic" in seen[n]
             if topics is not None else None} for n in sorted(seen)]
