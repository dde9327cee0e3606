"""No train/serve skew on 16-bit images, end to end: a cnn trained (a real job) on a folder of
16-bit grey PNGs scores held-out 16-bit PNGs, sent raw on the stream, at its validation accuracy.
(Trainer and scorer once read such PNGs differently, clipped vs scaled, and the stream scored at
chance.) Then a grey image into a colour model is counted in the scorer's metrics."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import numpy as np
from PIL import Image

from headrace.contracts import ModelSpec, TrainRequested
from headrace.core.settings import Settings
from headrace.store import versions
from headrace.streams.clients import KafkaConnection
from headrace.streams.topics import predictions_topic
from headrace.trainers import jobs
from headrace.trainers.dataset_files import put_dataset
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.job_process import run_job
from tests.scorers import signature_models as sm
from tests.scorers.conftest import eventually, http_get, read_topic, ready_scorer
from tests.scorers.test_scoring_signatures import produce

TRAIN_ROWS = 1200


def sixteen_bit_digits() -> tuple[np.ndarray, np.ndarray]:
    """The digits as 16-bit grey (0..16 scaled to 0..65535), most pixels above 255."""
    from sklearn.datasets import load_digits

    d = load_digits()
    return np.rint(d.images * (65535 / 16)).astype(np.uint16), d.target


def png16(img: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")  # uint16 -> mode I;16
    return buf.getvalue()


def test_a_cnn_trained_on_16_bit_pngs_scores_16_bit_pngs_on_the_stream_at_its_accuracy(
        settings: Settings, conn: KafkaConnection, dfs: Path, tmp_path: Path, data: str,
        stream: str) -> None:
    imgs, target = sixteen_bit_digits()
    # A random split: load_digits is ordered by writer, so its tail is not another sample of
    # the rows before it.
    order = np.random.default_rng(0).permutation(len(imgs))
    folder = tmp_path / "digits16"
    for i in order[:TRAIN_ROWS].tolist():
        (folder / str(target[i])).mkdir(parents=True, exist_ok=True)
        (folder / str(target[i]) / f"{i:04d}.png").write_bytes(png16(imgs[i]))
    uri = put_dataset(root=dfs, path=folder, name="digits16").uri
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name=stream,
                         framework="tensorflow", dataset_uri=uri,
                         spec=ModelSpec(model="cnn", epochs=8, batch_size=64, hidden=(64,),
                                        learning_rate=0.003))
    jid, _ = jobs.create_request(dfs, req)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.version is not None
    mv = versions.load_version(dfs, stream, st.version)
    val_accuracy = mv.manifest.metrics["accuracy"]
    assert val_accuracy >= 0.9, mv.manifest.metrics
    assert versions.read_alias(dfs, stream).version == mv.version

    held_out = order[TRAIN_ROWS:].tolist()
    produce(conn, data, [(f"h{i}", png16(imgs[i]), "image/png") for i in held_out])
    with ready_scorer(settings, conn) as scorer:
        msgs = read_topic(conn, predictions_topic(stream), expect=len(held_out))
        _, metrics = http_get(scorer.http_port, "/metrics")
    preds = {json.loads(m.value())["key"]: json.loads(m.value())["label"] for m in msgs}
    right = [preds[f"h{i}"] == str(target[i]) for i in held_out]
    stream_accuracy = float(np.mean(right))
    # Held-out rows are another sample of the same digits: within sampling noise of validation.
    assert abs(stream_accuracy - val_accuracy) <= 0.05, (stream_accuracy, val_accuracy)
    assert b"headrace_scorer_image_conversions_total{" not in metrics  # grey into grey


def test_grey_images_into_a_colour_model_are_scored_and_counted(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    sm.tf_rgb_digits(dfs, stream)
    grey = [sm.encode(i) for i in sm.digits(6)]
    produce(conn, data, [(f"g{i}", b, "image/png") for i, b in enumerate(grey)])
    line = (f'headrace_scorer_image_conversions_total{{conversion="L->RGB",stream="{stream}"}} '
            f'6.0').encode()
    with ready_scorer(settings, conn) as scorer:
        msgs = read_topic(conn, predictions_topic(stream), expect=6)
        # Counted once the batch is committed, just after its predictions are acknowledged.
        eventually(lambda: line in http_get(scorer.http_port, "/metrics")[1],
                   what="the conversions counted")
    assert {json.loads(m.value())["key"] for m in msgs} == {f"g{i}" for i in range(6)}
