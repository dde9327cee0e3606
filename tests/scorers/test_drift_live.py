"""Live drift on the real broker with models trained by real jobs (both frameworks): the
trainer writes the profile, the scorer's drift tap counts every batch, publishes DriftDetected on
events.drift when a feature drifts, and resumes its open window after a restart."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from headrace.contracts import DriftDetected, DriftWindowState, ModelSpec, TrainRequested, parse
from headrace.core.settings import Settings
from headrace.drift.fitting import PROFILE_FILE
from headrace.scorers.drift_tap import sample
from headrace.store import versions
from headrace.streams.clients import KafkaConnection
from headrace.streams.topics import ControlTopics
from headrace.trainers import jobs
from headrace.trainers.dataset_files import put_dataset
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.job_process import run_job
from tests.fixtures import eventually, http_get, read_all, ready_scorer
from tests.scorers.test_scoring_signatures import arrow_item, produce

WINDOW = 300
CHUNK = 50  # rows per Arrow message; the scorer's batches are two of them


def table(rng: np.random.Generator, rows: int, *, shift_sd: float = 0.0,
          dominant: str | None = None) -> dict[str, Any]:
    colour = rng.choice(np.array(["red", "green", "blue"], dtype=object), rows, p=[0.3, 0.5, 0.2])
    if dominant is not None:
        colour[: int(rows * 0.7)] = dominant
        rng.shuffle(colour)
    return {"size": rng.normal(1000 + 300 * shift_sd, 300, rows), "w": rng.normal(0, 1, rows),
            "colour": colour}


def train(dfs: Path, tmp_path: Path, name: str, framework: str) -> versions.ModelVersion:
    rng = np.random.default_rng(0)
    t = table(rng, 2000)
    label = (t["colour"] == "red") | (t["size"] > 1200)
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"colour": str(c), "size": float(s), "w": float(w),
                                        "label": int(y)}) + "\n"
                            for c, s, w, y in zip(t["colour"], t["size"], t["w"], label,
                                                  strict=True)))
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name=name,
                         framework=framework, dataset_uri=put_dataset(root=dfs, path=path).uri,
                         spec=ModelSpec(epochs=4, batch_size=64, hidden=(8,),
                                        learning_rate=0.02, drift_window=WINDOW))
    jid, _ = jobs.create_request(dfs, req)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.version is not None
    versions.set_alias(dfs, name, st.version)  # served whatever its gate said
    return versions.load_version(dfs, name, st.version)


def send(conn: KafkaConnection, data: str, t: dict[str, Any], tag: str) -> None:
    n = len(t["size"])
    produce(conn, data, [arrow_item(f"{tag}{i}", pa.table({
        "size": pa.array(t["size"][i:i + CHUNK], pa.float64()),
        "w": pa.array(t["w"][i:i + CHUNK], pa.float64()),
        "colour": pa.array(list(t["colour"][i:i + CHUNK]), pa.string())}))
        for i in range(0, n, CHUNK)])


def drift_events(conn: KafkaConnection, stream: str) -> list[DriftDetected]:
    out = [parse(DriftDetected, r.value or b"")
           for r in read_all(conn, ControlTopics().drift) if r.value]
    return [e for e in out if e.stream == stream]


def states(conn: KafkaConnection, stream: str) -> list[DriftWindowState]:
    out = [parse(DriftWindowState, r.value or b"")
           for r in read_all(conn, ControlTopics().drift_state) if r.value]
    return [s for s in out if s.stream == stream]


def windows_closed(conn: KafkaConnection, stream: str, n: int) -> list[DriftWindowState]:
    return eventually(lambda: (s := states(conn, stream)) and s[-1].window >= n and s,
                      timeout_s=60, what=f"{n} drift windows closed")


OVERRIDES = {"batch_size": 2 * CHUNK, "max_wait_ms": 200, "decode_processes": 0}


@pytest.mark.parametrize("framework", ["tensorflow", "mxnet"])
def test_a_half_sd_shift_in_one_feature_is_published_within_two_windows_naming_it(
        framework: str, settings: Settings, conn: KafkaConnection, dfs: Path, stream: str,
        data: str, tmp_path: Path) -> None:
    mv = train(dfs, tmp_path, stream, framework)
    assert PROFILE_FILE in mv.manifest.files  # hashed with the model
    rng = np.random.default_rng(1)
    with ready_scorer(settings, conn, **OVERRIDES) as scorer:
        send(conn, data, table(rng, WINDOW), "same")  # held-out rows of the training mix
        windows_closed(conn, stream, 1)
        assert drift_events(conn, stream) == []  # no alarm on the training distribution
        send(conn, data, table(rng, 2 * WINDOW, shift_sd=0.5), "shift")
        windows_closed(conn, stream, 3)
        status, body = http_get(scorer.http_port, "/metrics")
    events = drift_events(conn, stream)
    drifting_inputs = {e.feature for e in events if e.drifting} - {
        "prediction:class", "prediction:score"}  # the shift may move predictions too
    assert drifting_inputs == {"size"}, events
    first = min(e.window for e in events if e.feature == "size")
    assert first in (2, 3)  # within two windows of the shift
    e = next(e for e in events if e.feature == "size")
    assert e.model_name == stream and e.model_version == mv.version and e.rows == WINDOW
    assert e.value > e.threshold and e.statistic in ("psi", "ks")
    assert sum(r.last - r.first + 1 for r in e.ranges) == WINDOW // CHUNK  # its messages
    text = body.decode()
    assert status == 200 and 'headrace_scorer_drift_windows_total{full="true"' in text
    assert 'headrace_scorer_drift_drifting{feature="size"' in text


def test_brighter_images_drift_on_the_broker_as_image_brightness(
        settings: Settings, conn: KafkaConnection, dfs: Path, stream: str, data: str,
        tmp_path: Path) -> None:
    from PIL import Image

    from tests.trainers.families_data import digits_folder

    folder = digits_folder(tmp_path / "digits", rows=600)
    uri = put_dataset(root=dfs, path=folder, name="digits").uri
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name=stream,
                         framework="tensorflow", dataset_uri=uri,
                         spec=ModelSpec(model="cnn", epochs=1, batch_size=32, filters=(4,),
                                        hidden=(8,), drift_window=100))
    jid, _ = jobs.create_request(dfs, req)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.version is not None
    versions.set_alias(dfs, stream, st.version)
    profile = json.loads((versions.load_version(dfs, stream, st.version).path
                          / PROFILE_FILE).read_text())
    assert {"image:brightness", "image:contrast", "prediction:class"} <= set(profile["features"])

    from sklearn.datasets import load_digits

    pixels = np.clip(load_digits().images[600:900] * (255 / 16), 0, 255)

    def pngs(imgs: np.ndarray, tag: str) -> list[tuple[str, bytes, str]]:
        out = []
        for i, img in enumerate(imgs):
            buf = io.BytesIO()
            Image.fromarray(img.astype(np.uint8), mode="L").save(buf, format="PNG")
            out.append((f"{tag}{i}", buf.getvalue(), "image/png"))
        return out

    with ready_scorer(settings, conn, **OVERRIDES):
        produce(conn, data, pngs(pixels[:100], "same"))
        windows_closed(conn, stream, 1)
        assert [e for e in drift_events(conn, stream) if e.drifting] == []
        produce(conn, data, pngs(np.clip(pixels[100:300] + 50, 0, 255), "bright"))
        windows_closed(conn, stream, 3)
    events = [e for e in drift_events(conn, stream) if e.drifting]
    assert "image:brightness" in {e.feature for e in events}, events
    assert min(e.window for e in events if e.feature == "image:brightness") in (2, 3)


def test_the_scorers_row_sample_is_capped_and_evenly_spaced() -> None:
    rng = np.random.default_rng(33)
    assert sample(100, 1024, rng) == slice(None)
    rows = np.arange(8192)[sample(8192, 1000, rng)]
    assert 900 <= len(rows) <= 1000 and len(set(np.diff(rows).tolist())) == 1


def test_the_chart_variables_turn_the_tap_off_and_set_its_time_bound(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    from headrace.scorers.drift_tap import DriftTap, factory
    from headrace.scorers.engine.metrics import ScorerMetrics
    from headrace.scorers.engine.settings import load_scorer_settings
    from headrace.scorers.engine.taps import TapContext

    def tap() -> DriftTap | None:
        scorer = load_scorer_settings(stream=settings.streams[0])
        return factory(TapContext(settings, scorer, None,
                                  ScorerMetrics(stream=scorer.stream, model="m")))

    monkeypatch.setenv("HEADRACE_DRIFT_WINDOW_SECONDS", "300")
    on = tap()
    assert on is not None and on.time_bound_s == 300.0 and on.cap == 1024
    monkeypatch.setenv("HEADRACE_DRIFT_ENABLED", "false")
    assert tap() is None
