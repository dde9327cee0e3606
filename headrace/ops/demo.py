"""``headrace demo``: the bounded tour a newcomer runs first.

Stages (each fails with one line naming it):

1. Start the broker (embedded unless configured) and the control plane + local executor.
2. Make the demo dataset on the DFS (``headrace datasets make-demo``).
3. Publish a TrainRequested for TensorFlow; wait for the job to pass the gate and publish
   (``events.jobs`` for progress and failures, ``events.models`` + the DFS alias for the publish).
4. Start a scorer for stream ``demo``; stream half the records; show predictions arriving live.
5. Publish a TrainRequested for MXNet; wait for its publish; stream the other half; show the
   scorer swap to the new version.
   Then an image model: scikit-learn's digits as a PNG folder (``datasets put``), a ``cnn``
   trained with MXNet and published as ``digits``; a second scorer (stream ``digits``) scores
   held-out digit PNGs sent as raw ``image/png`` messages; the accuracy of its predictions
   against the known labels is read back from ``predictions.digits``.
6. Print a summary (records in, predictions out, DLQ count, model versions, throughput,
   image accuracy); exit 0.

It uses a temporary DFS root unless one was chosen (``--dfs-root``/``HEADRACE_DFS_ROOT``).
"""

from __future__ import annotations

import io
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from headrace.contracts import (
    Framework,
    JobEvent,
    JobEventKind,
    ModelPublished,
    ModelSpec,
    Prediction,
    TrainRequested,
    Trigger,
    parse,
)
from headrace.core.errors import FatalError, HeadraceError, ValidationFailed
from headrace.core.settings import Settings
from headrace.ops.stack import CLI, Stack, wait_until
from headrace.store import versions
from headrace.streams.clients import KafkaConnection, partition_count
from headrace.streams.producing import send_events
from headrace.streams.reading import Follower, probe_ends
from headrace.streams.sending import send_table
from headrace.streams.topics import (
    JOB_EVENTS,
    MODEL_EVENTS,
    TRAIN_REQUESTS,
    data_topic,
    dlq_topic,
    predictions_topic,
)

STREAM = "demo"
MODEL = "demo"
IMAGE_STREAM = "digits"  # the scorer's model defaults to the stream's name
IMAGE_HOLDOUT = 6  # every 6th digit (~300 images) is kept out of training and scored
TRAIN_TIMEOUT_S = 150.0
SCORE_TIMEOUT_S = 90.0


@dataclass
class Tour:
    conn: KafkaConnection
    stack: Stack
    say: Callable[[str], None]  # a line of progress, for the CLI to render
    records_in: int = 0
    predictions: Counter[int] = field(default_factory=Counter)  # model version -> count
    # Prediction messages already counted: on Tansu, "the end" of a topic is the last record
    # batch's base offset + 1, so a new follower reads part of that batch again.
    seen: set[tuple[int, int]] = field(default_factory=set)
    versions: dict[str, int] = field(default_factory=dict)  # framework -> version
    score_seconds: float = 0.0
    stage: str = "start"
    images: ImageScore | None = None


@dataclass(frozen=True)
class ImageScore:
    """What ``predictions.digits`` held for the held-out digits."""

    sent: int
    predicted: int  # distinct keys with a prediction
    correct: int
    dead: int
    models: tuple[str, ...]  # name:version of the predictions
    seconds: float

    @property
    def accuracy(self) -> float:
        return self.correct / self.predicted if self.predicted else 0.0


def run_demo(*, settings: Settings, records: int, epochs: int, say: Callable[[str], None],
             keep_dfs: bool) -> int:
    tmp = None
    if not keep_dfs:
        tmp = Path(tempfile.mkdtemp(prefix="headrace-demo-"))
        settings = settings.with_overrides(dfs_root=tmp / "dfs")
    settings = settings.with_overrides(streams=[STREAM, IMAGE_STREAM])
    settings.dfs_root.mkdir(parents=True, exist_ok=True)
    stack = Stack(settings, log_dir=settings.dfs_root / "ops" / "logs" / "demo", scorers=[])
    tour: Tour | None = None
    t0 = time.monotonic()
    try:
        say("1/6 starting the broker and the control plane")
        conn = stack.start_broker()
        kind = "embedded broker, memory only" if stack.broker else "the named Kafka"
        say(f"  broker {conn.bootstrap} ({kind}); DFS {settings.dfs_root}")
        tour = Tour(conn, stack, say)
        stack.start_control()
        tour.stage = "make the demo dataset"
        say("2/6 making the demo dataset")
        dataset_uri, table = make_dataset(settings, stack)
        say(f"  {dataset_uri}: {table.num_rows} rows, columns {table.column_names}")
        tour.stage = "train TensorFlow"
        say("3/6 training with TensorFlow; waiting for the gate and the publish")
        train(tour, settings, Framework.TENSORFLOW, dataset_uri, epochs)
        tour.stage = "score live"
        say(f"4/6 starting a scorer for stream {STREAM}; streaming records")
        stack.start_scorer(STREAM)
        features = features_of(settings)
        rows = sample_rows(table, features, records)
        half = rows.num_rows // 2
        stream_and_watch(tour, rows.slice(0, half), expect_version=tour.versions["tensorflow"])
        tour.stage = "train MXNet and swap"
        say("5/6 training with MXNet; the scorer swaps when it is published")
        train(tour, settings, Framework.MXNET, dataset_uri, epochs)
        stream_and_watch(tour, rows.slice(half), expect_version=tour.versions["mxnet"])
        tour.stage = "train an image model"
        held_out = train_image_model(tour, settings)
        if held_out is not None:
            tour.stage = "score images"
            tour.images = score_images(tour, held_out)
        tour.stage = "summary"
        summary(tour, time.monotonic() - t0)
        return 0
    except (HeadraceError, OSError) as exc:
        stage = tour.stage if tour else "start the broker"
        say(f"demo failed at stage '{stage}': {exc}")
        for c in stack.components:
            if c.last_log_line():
                say(f"  {c.name}: {c.last_log_line()}  (log {c.log_path})")
        return 1
    finally:
        stack.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def make_dataset(settings: Settings, stack: Stack) -> tuple[str, pa.Table]:
    import subprocess

    before = set(_parquet_files(settings.dfs_root))
    proc = subprocess.run([*CLI, "datasets", "make-demo"], env=stack.env(), capture_output=True,
                          timeout=120, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip().splitlines()
        raise FatalError(f"`headrace datasets make-demo` exited {proc.returncode}: "
                         f"{tail[-1] if tail else ''}")
    new = [p for p in _parquet_files(settings.dfs_root) if p not in before] or \
        _parquet_files(settings.dfs_root)
    if not new:
        raise FatalError("`headrace datasets make-demo` wrote no Parquet file under the DFS root")
    path = max(new, key=lambda p: p.stat().st_mtime)
    rel = path.relative_to(settings.dfs_root)
    # A dataset may be one file or a directory of part files; train on what was written.
    uri = str(rel.parent if path.name.startswith("part-") else rel)
    return uri, pq.read_table(path)


def _parquet_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.parquet") if "/ops/" not in str(p)]


def train(tour: Tour, settings: Settings, framework: Framework, dataset_uri: str,
          epochs: int) -> None:
    before = versions.read_alias(settings.dfs_root, MODEL) if _has_model(settings) else None
    req = TrainRequested(
        idempotency_key=f"demo-{framework.value}-{int(time.time())}", model_name=MODEL,
        framework=framework, dataset_uri=dataset_uri,
        spec=ModelSpec(epochs=epochs, hidden=(32, 32), batch_size=128),
        trigger=Trigger(source="headrace demo"))
    send_events(tour.conn, TRAIN_REQUESTS, [req], key_of=lambda e: e.idempotency_key)
    jobs = Follower(tour.conn, [JOB_EVENTS, MODEL_EVENTS])
    deadline = time.monotonic() + TRAIN_TIMEOUT_S
    published: ModelPublished | None = None
    last_line = 0.0
    try:
        while published is None:
            if time.monotonic() > deadline:
                raise FatalError(f"no {framework.value} model published within "
                                 f"{TRAIN_TIMEOUT_S:.0f}s")
            _check_alive(tour.stack)
            for rec in jobs.poll(0.5):
                if rec.topic == MODEL_EVENTS:
                    try:
                        ev = parse(ModelPublished, rec.value or b"")
                    except ValidationFailed:
                        continue
                    if ev.model_name == MODEL and ev.framework == framework and (
                            before is None or ev.version != before.version):
                        published = ev
                    continue
                try:
                    je = parse(JobEvent, rec.value or b"")
                except ValidationFailed:
                    continue
                if je.request_id not in (None, req.event_id) or je.model_name not in (None, MODEL):
                    continue
                if je.kind == JobEventKind.FAILED:
                    raise FatalError(f"training job {je.job_id} failed: {je.reason or je.message}")
                shown = (JobEventKind.PROGRESS, JobEventKind.SUCCEEDED, JobEventKind.STARTED)
                if je.kind in shown and time.monotonic() - last_line > 1.0:
                    metrics = " ".join(f"{k}={v:.3f}" for k, v in list(je.metrics.items())[:3])
                    tour.say(f"  job {je.job_id}: {je.kind.value}"
                                       + (f" epoch {je.epoch}" if je.epoch is not None else "")
                                       + (f" {metrics}" if metrics else ""))
                    last_line = time.monotonic()
    finally:
        jobs.close()
    wait_until(lambda: (a := versions.read_alias(settings.dfs_root, MODEL)) is not None
               and a.version == published.version, timeout_s=30,
               what=f"production alias of {MODEL} to move to {published.version}")
    tour.versions[framework.value] = published.version
    acc = published.metrics.get("accuracy")
    tour.say(f"  published {MODEL}:{published.version} ({framework.value})"
                       + (f", accuracy {acc:.3f}" if acc is not None else "")
                       + " -> production")


def train_image_model(tour: Tour, settings: Settings) -> pa.Table | None:
    """Digits (8x8 PNGs, 10 classes) through ``datasets put`` and a ``cnn`` job, published as
    model ``digits``. Returns the held-out digits (``key``, ``label``, ``image`` PNG bytes),
    or None when scikit-learn is missing."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        tour.say("+ image model skipped: scikit-learn is not installed")
        return None
    from PIL import Image

    from headrace.trainers import jobs
    from headrace.trainers.dataset_files import put_dataset

    tour.say("+ an image model: digits as PNG folders, a cnn with MXNet")
    folder = settings.dfs_root / "ops" / "demo-digits"
    d = load_digits()
    held: dict[str, list[object]] = {"key": [], "label": [], "image": []}
    for i, (img, y) in enumerate(zip((d.images * (255 / 16)).astype("uint8"), d.target,
                                     strict=True)):
        buf = io.BytesIO()
        Image.fromarray(img, mode="L").save(buf, format="PNG")
        if i % IMAGE_HOLDOUT == 0:  # never trained on: scored below
            held["key"].append(f"digit-{i:04d}")
            held["label"].append(str(y))
            held["image"].append(buf.getvalue())
            continue
        (folder / str(y)).mkdir(parents=True, exist_ok=True)
        (folder / str(y) / f"{i:04d}.png").write_bytes(buf.getvalue())
    info = put_dataset(root=settings.dfs_root, path=folder, name="digits")
    tour.say(f"  {info.uri}: {info.rows} rows, kinds {info.kinds}; "
             f"{len(held['key'])} digits held out for scoring")
    # The scorer starts now: it loads its framework while the job trains, then waits for the
    # first production version of ``digits``.
    tour.stack.start_scorer(IMAGE_STREAM)
    req = TrainRequested(
        idempotency_key=f"demo-digits-{int(time.time())}", model_name="digits",
        framework=Framework.MXNET, dataset_uri=info.uri,
        spec=ModelSpec(model="cnn", epochs=6, hidden=(64,), batch_size=64, learning_rate=0.003),
        trigger=Trigger(source="headrace demo"))
    send_events(tour.conn, TRAIN_REQUESTS, [req], key_of=lambda e: e.idempotency_key)
    job_id = jobs.job_id_for(req.idempotency_key)

    def done() -> bool:
        st = jobs.read_status(settings.dfs_root, job_id)
        if st is not None and st.state.value == "failed":
            raise FatalError(f"training job {job_id} failed: {st.reason}")
        return st is not None and st.state.value == "succeeded"

    wait_until(done, timeout_s=TRAIN_TIMEOUT_S, what=f"image job {job_id} to finish",
               stack=tour.stack)
    mv = versions.resolve(settings.dfs_root, "digits@production")
    tour.say(f"  published digits:{mv.version} (cnn, mxnet), validation accuracy "
                       f"{mv.manifest.metrics.get('accuracy', 0.0):.3f} -> production")
    return pa.table({"key": pa.array(held["key"], pa.string()),
                     "label": pa.array(held["label"], pa.string()),
                     "image": pa.array(held["image"], pa.binary())})


def score_images(tour: Tour, held_out: pa.Table) -> ImageScore:
    """Send the held-out digits to ``data.digits`` as raw ``image/png`` messages (key: the
    digit's id), wait until each has a prediction (or a dead letter), and score the predicted
    labels against the known ones, as read back from ``predictions.digits``."""
    truth = dict(zip(held_out.column("key").to_pylist(), held_out.column("label").to_pylist(),
                     strict=True))
    t0 = time.monotonic()
    send_table(tour.conn, data_topic(IMAGE_STREAM), held_out.select(["key", "image"]),
               fmt="raw", key_column="key")
    tour.say(f"  sent {len(truth)} digit PNGs to {data_topic(IMAGE_STREAM)} "
             "(raw image/png messages)")
    got: dict[str, Prediction] = {}
    watcher = Follower(tour.conn, [predictions_topic(IMAGE_STREAM)])
    deadline = time.monotonic() + SCORE_TIMEOUT_S
    try:
        while len(got) + _count(tour.conn, dlq_topic(IMAGE_STREAM)) < len(truth):
            if time.monotonic() > deadline:
                raise FatalError(f"{len(truth) - len(got)} of {len(truth)} digits have no "
                                 f"prediction after {SCORE_TIMEOUT_S:.0f}s")
            _check_alive(tour.stack)
            for rec in watcher.poll(0.5):
                try:
                    p = parse(Prediction, rec.value or b"")
                except ValidationFailed:
                    continue
                if p.key is not None and p.key in truth:
                    got[p.key] = p
    finally:
        watcher.close()
    correct = sum(str(p.label) == truth[k] for k, p in got.items())
    score = ImageScore(sent=len(truth), predicted=len(got), correct=correct,
                       dead=_count(tour.conn, dlq_topic(IMAGE_STREAM)),
                       models=tuple(sorted({f"{p.model_name}:{p.model_version}"
                                            for p in got.values()})),
                       seconds=time.monotonic() - t0)
    tour.say(f"  {score.predicted} predictions by {', '.join(score.models)}: "
             f"{score.correct}/{score.predicted} correct, accuracy {score.accuracy:.3f}")
    return score


def _has_model(settings: Settings) -> bool:
    return MODEL in versions.list_models(settings.dfs_root)


def features_of(settings: Settings) -> list[str]:
    mv = versions.resolve(settings.dfs_root, MODEL)
    return list(mv.manifest.features)


def sample_rows(table: pa.Table, features: list[str], n: int) -> pa.Table:
    cols = [f for f in features if f in table.column_names]
    if len(cols) != len(features):
        raise FatalError(f"the demo dataset lacks features {sorted(set(features) - set(cols))}")
    t = table.select(cols)
    reps = -(-n // max(1, t.num_rows))
    return pa.concat_tables([t] * reps).slice(0, n)


def stream_and_watch(tour: Tour, rows: pa.Table, *, expect_version: int) -> None:
    """Send ``rows`` to data.demo and print predictions as they arrive until every row of
    this batch has one from ``expect_version`` (or the rest went to the DLQ)."""
    conn = tour.conn
    watcher = Follower(conn, [predictions_topic(STREAM)], from_beginning=False)
    try:
        watcher.poll(0.2)  # assign at the end before sending
        t0 = time.monotonic()
        # The scorer swaps on ModelPublished; records sent before it loaded the new version
        # are scored by the old one, so keep sending small slices until the new one shows.
        sent = 0
        got_new = got_old = 0
        last_print = 0.0
        deadline = time.monotonic() + SCORE_TIMEOUT_S
        slice_rows = max(1, rows.num_rows // 10)
        last_send = 0.0
        while True:
            # Past the end and everything so far scored by the old version (the swap is
            # slower than streaming this half on a loaded box): send a slice again, each second.
            again = (sent >= rows.num_rows and got_new == 0 and got_old > 0
                     and time.monotonic() - last_send > 1)
            if sent < rows.num_rows or again:
                chunk = rows.slice(sent % rows.num_rows, slice_rows)
                send_table(conn, data_topic(STREAM), chunk, fmt="json")
                sent += chunk.num_rows
                tour.records_in += chunk.num_rows
                last_send = time.monotonic()
            for rec in watcher.poll(0.3):
                if (rec.partition, rec.offset) in tour.seen:
                    continue
                tour.seen.add((rec.partition, rec.offset))
                try:
                    p = parse(Prediction, rec.value or b"")
                except ValidationFailed:
                    continue
                tour.predictions[p.model_version] += 1
                if p.model_version == expect_version:
                    got_new += 1
                else:
                    got_old += 1
                if time.monotonic() - last_print > 0.5:
                    tour.say(
                        f"  prediction {p.source_topic}[{p.source_partition}]@{p.source_offset}"
                        f" -> {p.label!s:<12} by {p.model_name}:{p.model_version}"
                        f"   ({sum(tour.predictions.values())} so far)")
                    last_print = time.monotonic()
            if sent >= rows.num_rows and got_new > 0 and _caught_up(tour):
                break
            if time.monotonic() > deadline:
                raise FatalError(f"predictions from version {expect_version} did not arrive "
                                 f"within {SCORE_TIMEOUT_S:.0f}s ({got_new} seen)")
            _check_alive(tour.stack)
        tour.score_seconds += time.monotonic() - t0
        tour.say(f"  {got_new} predictions by {MODEL}:{expect_version}")
    finally:
        watcher.close()


def _caught_up(tour: Tour) -> bool:
    """Every record sent has a prediction or a dead letter (verified end offsets)."""
    preds = _count(tour.conn, predictions_topic(STREAM))
    dead = _count(tour.conn, dlq_topic(STREAM))
    return preds + dead >= tour.records_in


def _count(conn: KafkaConnection, topic: str) -> int:
    n = partition_count(conn, topic) or 0
    return sum(end - lo for lo, end in probe_ends(conn, topic, range(n)).values())


def summary(tour: Tour, elapsed_s: float) -> None:
    preds = _count(tour.conn, predictions_topic(STREAM))
    dead = _count(tour.conn, dlq_topic(STREAM))
    c = tour.say
    c("6/6 summary")
    c(f"  records in        {tour.records_in}")
    c(f"  predictions out   {preds}")
    c(f"  dead letters      {dead}")
    c("  model versions    " + ", ".join(
        f"{MODEL}:{v} ({fw})" for fw, v in tour.versions.items()))
    c("  predictions by    " + ", ".join(
        f"v{v}: {n}" for v, n in sorted(tour.predictions.items())))
    rate = tour.records_in / tour.score_seconds if tour.score_seconds else 0.0
    c(f"  throughput        {rate:,.0f} records/s end to end (incl. waiting for the swap)")
    if tour.images is not None:
        im = tour.images
        c(f"  images in         {im.sent}  ({data_topic(IMAGE_STREAM)}, held out of training)")
        c(f"  image predictions {im.predicted}  by {', '.join(im.models)}")
        c(f"  image dead letters {im.dead}")
        c(f"  image accuracy    {im.accuracy:.3f}  ({im.correct}/{im.predicted} against the "
          "known labels)")
    c(f"  total time        {elapsed_s:.0f}s")
    if preds + dead < tour.records_in:
        raise FatalError(f"{tour.records_in - preds - dead} records have neither a prediction "
                         "nor a dead letter")


def _check_alive(stack: Stack) -> None:
    """``FatalError`` naming the first component of the stack that died, with its last line."""
    dead = stack.dead()
    if dead:
        raise FatalError(f"{dead[0].name} {dead[0].status()}: {dead[0].last_log_line()}")
