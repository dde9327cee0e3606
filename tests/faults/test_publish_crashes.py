"""A model publish crashed at each step while a scorer polls: no partial version is ever loaded;
a corrupted file is refused with a clear error and the old version keeps serving."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from headrace.store.dfs import write_atomic
from headrace.store.versions import (
    IntegrityError,
    list_versions,
    load_version,
    read_alias,
    set_alias,
)
from headrace.streams.clients import KafkaConnection
from tests.faults.conftest import needs_scorer
from tests.faults.harness import (
    LoadGenerator,
    Scorers,
    Stream,
    TopicReader,
    check,
    figures,
    tiny_manifest,
    wait_covered,
    write_keras_mlp,
)
from tests.fixtures import eventually

pytestmark = [pytest.mark.slow, needs_scorer]
STEPS = ["mid-file-write", "files-written", "files-hashed", "manifest-written", "renamed"]

CRASHING_PUBLISH = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from headrace.store.manifest import Manifest
    from headrace.store.versions import publish
    root, name, step, template = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
    manifest = Manifest.model_validate_json(sys.argv[5])
    def write(d):
        data = template.read_bytes()  # a real model.keras, built once by the test (no TF here)
        if step == "mid-file-write":  # a half-written model file, then death
            (d / "model.keras").write_bytes(data[: len(data) // 2])
            os._exit(137)
        (d / "model.keras").write_bytes(data)
    def hook(s):
        if s == step:
            os._exit(137)
    publish(root, manifest, write, hook=hook)
    # "renamed": never reached; the alias would be moved only after a complete publish
""")


def _metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and "_created" not in line)


def test_publish_crashes_at_every_step_never_expose_a_partial_version(
        conn: KafkaConnection, stream: Stream, model: str, dfs: Path, scorers: Scorers,
        tmp_path: Path) -> None:
    template = tmp_path / "template"
    template.mkdir()
    write_keras_mlp(template, seed=5)
    load = LoadGenerator(conn, stream, rate=100, total=1000).start()
    s = scorers.start(model_poll_s=0.3)
    s.wait_ready()
    for step in STEPS:
        out = subprocess.run([sys.executable, "-c", CRASHING_PUBLISH, str(dfs), model, step,
                              str(template / "model.keras"),
                              tiny_manifest(model).model_dump_json()],
                             capture_output=True, timeout=120, cwd=Path(__file__).parents[2])
        assert out.returncode == 137, out.stderr.decode()[-2000:]
        # Only complete versions are visible, and each verifies against its manifest.
        for v in list_versions(dfs, model):
            load_version(dfs, model, v)
        time.sleep(0.5)  # several scorer polls
    versions = list_versions(dfs, model)
    alias = read_alias(dfs, model)
    assert alias is not None and alias.version == 1
    # Only the crash after the rename leaves a (complete, unpromoted) version 2.
    assert versions == [1, 2], versions

    # Corruption after promotion: version 2 promoted, then its file changes under the scorer.
    v2 = load_version(dfs, model, 2)
    (v2.path / "model.keras").write_bytes(b"corrupted" * 100)
    with pytest.raises(IntegrityError, match="sha256"):
        set_alias(dfs, model, 2)  # promotion refuses it with a clear error
    pointer = {"version": 2, "manifest_sha256": v2.manifest_sha256, "previous": 1,
               "updated_at": "2026-01-01T00:00:00+00:00", "reason": "corrupted after promote"}
    write_atomic(dfs / "models" / model / "aliases" / "production.json",
                 json.dumps(pointer).encode())
    eventually(lambda: _metric(s.port, "headrace_scorer_model_load_failures") >= 1,
               timeout_s=10, interval_s=0.2, what="the corrupted version refused")
    failures = _metric(s.port, "headrace_scorer_model_load_failures")

    load.join()
    preds, dlq = TopicReader(conn, stream.predictions), TopicReader(conn, stream.dlq)
    wait_covered(preds, load.all_acked, data_topic=stream.data, timeout_s=30, dlq=dlq)
    preds.drain(idle_s=1.0)
    c = check(load.all_acked(), preds.records, dlq.records, data_topic=stream.data)
    served = {json.loads(r.value)["model_version"] for r in preds.records}
    log = s.log_tail(20000)
    figures("publish_crashes", **c.summary(), steps=len(STEPS), versions=versions,
            served_versions=sorted(served), integrity_refusals=failures,
            scorer_alive=s.alive())
    assert s.alive(), log
    assert served == {1}, f"a scorer served {served}"
    assert failures >= 1, f"the corrupted version was not refused:\n{log}"
    assert "integrity" in log and "sha256" in log and "still serving" in log, log
    assert not c.missing
    rc, _ = s.terminate()
    assert rc == 0
