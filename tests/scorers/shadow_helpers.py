"""Shadow test helpers: the live counts as the topic holds them, and the offline recount of the
same records with ``headrace.models.load`` on both versions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from headrace.contracts import LiveCounts, parse
from headrace.models import load
from headrace.streams.clients import KafkaConnection
from headrace.streams.topics import ControlTopics, data_topic
from tests.fixtures import read_all


def live_counts(conn: KafkaConnection, topics: ControlTopics, stream: str
                ) -> dict[int, LiveCounts]:
    """The latest LiveCounts of each partition of ``stream`` (highest next_offset)."""
    out: dict[int, LiveCounts] = {}
    for rec in read_all(conn, topics.rollout_live):
        if not (rec.key or b"").startswith(f"{stream}|".encode()) or not rec.value:
            continue
        lc = parse(LiveCounts, rec.value)
        old = out.get(lc.partition)
        if old is None or lc.next_offset >= old.next_offset:
            out[lc.partition] = lc
    return out


def summed(counts: dict[int, LiveCounts]) -> dict[str, Any]:
    recs = list(counts.values())
    k = len(recs[0].classes) if recs else 0

    def add(name: str) -> list[list[int]]:
        total = np.zeros((k, k), np.int64)
        for r in recs:
            m = getattr(r, name)
            if m:
                total += np.asarray(m, np.int64)
        return total.tolist()

    return {"rows": sum(r.rows for r in recs), "matrix": add("matrix"),
            "candidate_errors": sum(r.candidate_errors for r in recs),
            "labelled": sum(r.labelled for r in recs),
            "production_truth": add("production_truth"),
            "candidate_truth": add("candidate_truth"),
            "only_production_right": sum(r.only_production_right for r in recs),
            "only_candidate_right": sum(r.only_candidate_right for r in recs),
            "classes": recs[0].classes if recs else []}


def offline_labels(dfs: Path, ref: str, conn: KafkaConnection, stream: str
                   ) -> dict[bytes, str]:
    """Every record of data.<stream> (as the topic holds it) predicted offline: key -> label."""
    recs = read_all(conn, data_topic(stream))
    model = load(ref, dfs_root=dfs)
    preds = model.predict([json.loads(r.value or b"") for r in recs])
    return {r.key or b"": str(p["label"]) for r, p in zip(recs, preds, strict=True)}


def matrix(classes: list[str], a: dict[bytes, str], b: dict[bytes, str],
           keys: list[bytes] | None = None) -> list[list[int]]:
    idx = {c: i for i, c in enumerate(classes)}
    m = np.zeros((len(classes), len(classes)), np.int64)
    for k in (keys if keys is not None else list(a)):
        m[idx[a[k]], idx[b[k]]] += 1
    return m.tolist()
