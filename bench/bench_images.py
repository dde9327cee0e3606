"""Image scoring benchmark: Headrace vs the model alone vs per-message loops vs MLServer.

Models (random weights, published to a temporary DFS store with a signature: one ``image``
input, 96x96x3, ten classes): ``mobilenet_v2`` (keras.applications.MobileNetV2, weights=None)
and ``cnn`` (a small Conv/Pool/Conv/GAP/Dense net built here; preprocessing inside the model).
Images: scikit-learn digits upscaled to 96x96 RGB and encoded as PNG (``--jpeg``: JPEG).

Contenders, side by side in one run on one embedded broker, each in its own subprocess:

  kafka-ml        poll one message, base64+Pillow decode, model.predict it, json.dumps,
                  produce; flush + commit synchronously every 16 messages (bounded count)
  per-message app consume one message, decode, call the model (``model(x)``, as Keras advises
                  for one input), produce; auto commit: the loop most Python apps write
  headrace JSON   the real scorer, one JSON record a message, the image base64 under "image"
  headrace Arrow  the real scorer, Arrow IPC messages of ARROW_ROWS rows, a binary image column
  model alone     the loaded model (headrace.scorers.engine.models.load_model, its inputs_fn) on
                  in-memory batches; "decoded" = float32 arrays ready (decode excluded),
                  "+decode" = the same PNG bytes decoded by headrace.store.images first
  mlserver        Seldon MLServer in its Kafka mode with a custom runtime serving the same
                  Keras file, if its venv exists (see bench/mlserver_peer.py for how to make it)

Throughput runs read a preloaded topic (steady state: the clock starts at the first output).
Latency runs offer a fixed rate below every batched contender's saturation and report p50/p99
from each input record's CreateTime to its output's. Peak RSS: VmHWM of the contender's process
(plus the scorer's decode helpers; plus MLServer's worker processes).

Run: ``python bench/bench_images.py [--quick] [--models mobilenet_v2,cnn] [--gpu]``.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

SIZE = 96
CLASSES = tuple(str(d) for d in range(10))
ARROW_ROWS = 32
MODEL_BATCH = 64
DISTINCT = 200  # distinct images, cycled


# -- data and models -----------------------------------------------------------------------------
def images(n: int, fmt: str = "PNG") -> list[bytes]:
    """``n`` encoded 96x96 RGB images: scikit-learn digits upscaled (bilinear), tinted."""
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits().images[:DISTINCT]
    rng = np.random.default_rng(0)
    distinct = []
    for d in digits:
        g = Image.fromarray(np.uint8(np.clip(d * 16, 0, 255))).resize((SIZE, SIZE),
                                                                     Image.Resampling.BILINEAR)
        tint = rng.uniform(0.5, 1.0, 3)
        rgb = np.stack([np.asarray(g, np.float32) * t for t in tint], -1)
        noise = rng.normal(0, 6, rgb.shape)
        buf = io.BytesIO()
        Image.fromarray(np.uint8(np.clip(rgb + noise, 0, 255)), "RGB").save(
            buf, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
        distinct.append(buf.getvalue())
    return [distinct[i % len(distinct)] for i in range(n)]


def json_records(imgs: list[bytes]) -> list[bytes]:
    return [b'{"image":"' + base64.b64encode(b) + b'"}' for b in imgs]


def arrow_messages(imgs: list[bytes], rows: int = ARROW_ROWS) -> list[bytes]:
    import pyarrow as pa

    from headrace.streams.codecs import encode_arrow

    return [encode_arrow(pa.table({"image": pa.array(imgs[s:s + rows], pa.binary())}))
            for s in range(0, len(imgs), rows)]


def build_keras(family: str, seed: int = 0) -> Any:
    import keras

    keras.utils.set_random_seed(seed)
    inp = keras.Input((SIZE, SIZE, 3), name="image")
    if family == "mobilenet_v2":
        x = keras.layers.Rescaling(1 / 127.5, offset=-1)(inp)  # MobileNetV2's preprocessing
        core = keras.applications.MobileNetV2(input_shape=(SIZE, SIZE, 3), weights=None,
                                              classes=len(CLASSES))
        out = core(x)
    elif family == "cnn":
        x = keras.layers.Rescaling(1 / 255)(inp)
        x = keras.layers.Conv2D(16, 3, activation="relu")(x)
        x = keras.layers.MaxPooling2D()(x)
        x = keras.layers.Conv2D(32, 3, activation="relu")(x)
        x = keras.layers.MaxPooling2D()(x)
        x = keras.layers.Conv2D(64, 3, activation="relu")(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
        out = keras.layers.Dense(len(CLASSES), activation="softmax")(x)
    elif family == "resnet50":
        core = keras.applications.ResNet50(input_shape=(224, 224, 3), weights=None,
                                           classes=len(CLASSES))
        inp = keras.Input((224, 224, 3), name="image")
        out = core(keras.applications.resnet50.preprocess_input(inp))
    else:
        raise SystemExit(f"unknown family {family}")
    return keras.Model(inp, out)


def publish(root: Path, family: str, *, candidate: bool = False) -> None:
    """Version 1 (production); with ``candidate``, also version 2 (other weights, the shadow
    candidate)."""
    _publish(root, family, seed=0, alias=True)
    if candidate:
        _publish(root, family, seed=1, alias=False)


def _publish(root: Path, family: str, *, seed: int, alias: bool) -> None:
    from headrace.store.manifest import Manifest
    from headrace.store.signature import InputKind, ModelInput, ModelOutput, OutputKind
    from headrace.store.versions import publish as put
    from headrace.store.versions import set_alias

    side = 224 if family == "resnet50" else SIZE
    model = build_keras(family, seed)
    m = Manifest(name=family.replace("_", ""), framework="tensorflow", task="classifier",
                 features=(), label="y", classes=CLASSES, family=family,
                 inputs=(ModelInput(name="image", kind=InputKind.IMAGE, height=side, width=side,
                                    channels=3),),
                 outputs=(ModelOutput(name="digit", kind=OutputKind.CLASSES, classes=CLASSES),))
    mv = put(root, m, lambda d: model.save(d / "model.keras"))
    if alias:
        set_alias(root, m.name, mv.version)


def _keras_file(a: argparse.Namespace) -> Path:
    from headrace.store.versions import resolve

    return Path(resolve(Path(a.dfs), a.model).path / "model.keras")


def _decode(data: bytes) -> np.ndarray:
    from PIL import Image

    im = Image.open(io.BytesIO(data)).convert("RGB").resize((SIZE, SIZE))
    return np.asarray(im, np.float32)[None]


# -- contenders (in a child process) ---------------------------------------------------------------
def contender_kafka_ml(a: argparse.Namespace) -> dict[str, Any]:
    import keras

    model = keras.saving.load_model(_keras_file(a), compile=False)
    return c.kafka_ml_loop(a, lambda v: model.predict(
        _decode(base64.b64decode(json.loads(v)["image"])), verbose=0)[0], CLASSES)


def contender_app(a: argparse.Namespace) -> dict[str, Any]:
    import keras

    model = keras.saving.load_model(_keras_file(a), compile=False)
    model(np.zeros((1, SIZE, SIZE, 3), np.float32), training=False)  # build before READY
    return c.per_message_app_loop(a, lambda v: np.asarray(model(
        _decode(base64.b64decode(json.loads(v)["image"])), training=False))[0], CLASSES)


def contender_headrace(a: argparse.Namespace) -> dict[str, Any]:
    return c.headrace_scorer(bootstrap=a.bootstrap, dfs=a.dfs, stream=a.stream, model=a.model,
                             rows=a.rows, batch_size=a.batch_size, max_wait_ms=a.max_wait_ms,
                             idempotent=a.idempotent, shadow=a.shadow)


def _loaded(a: argparse.Namespace) -> Any:
    from headrace.scorers.engine.models import load_model

    return load_model(root=Path(a.dfs), name=a.model, alias="production", device=a.device,
                      max_batch=a.batch_size)


def contender_model(a: argparse.Namespace) -> dict[str, Any]:
    """Decode excluded: float32 NHWC batches ready in memory."""
    model = _loaded(a)
    fn = model.inputs_fn
    assert fn is not None
    side = model.signature[0].height
    x = np.random.default_rng(0).uniform(0, 255, (a.batch_size, side, side, 3)).astype(
        np.float32)
    return c.timed_batches(lambda: len(fn({"image": x})[0]), a.rows)


def contender_model_decode(a: argparse.Namespace) -> dict[str, Any]:
    """Decode included: the same encoded bytes through headrace.store.images, then the model."""
    from headrace.store.images import ImageSpec, decode_batch

    model = _loaded(a)
    fn = model.inputs_fn
    assert fn is not None
    inp = model.signature[0]
    spec = ImageSpec(height=inp.height or SIZE, width=inp.width or SIZE, channels=3)
    imgs = images(a.batch_size, "JPEG" if a.jpeg else "PNG")

    def call() -> int:
        x = decode_batch(imgs, spec).pixels
        fn({"image": x})
        return len(x)

    return c.timed_batches(call, a.rows)


def contender_mlserver(a: argparse.Namespace) -> dict[str, Any]:
    import mlserver_peer

    return mlserver_peer.run(a, kind="image", side=SIZE, keras_file=_keras_file(a),
                             make_values=lambda n: images(n, "JPEG" if a.jpeg else "PNG"))


CONTENDERS = {"kafka-ml": contender_kafka_ml, "app": contender_app,
              "headrace": contender_headrace, "model": contender_model,
              "model-decode": contender_model_decode, "mlserver": contender_mlserver}


def child_main(a: argparse.Namespace) -> None:
    result = CONTENDERS[a.contender](a)
    result["rss_mib"] = c._rss_mib() + result.pop("extra_rss_mib", 0.0)
    print("RESULT " + json.dumps(result), flush=True)


# -- parent ----------------------------------------------------------------------------------------
def bench_model(family: str, a: argparse.Namespace, bootstrap: str, dfs: Path) -> None:
    import mlserver_peer

    from headrace.streams import headers as hdr

    q = a.quick
    name = family.replace("_", "")
    heavy = family == "mobilenet_v2"
    n_batch = (320 if heavy else 2000) if q else (1600 if heavy else 10000)
    n_kml = (16 if heavy else 48) if q else (64 if heavy else 320)
    n_app = (48 if heavy else 200) if q else (200 if heavy else 1000)
    rate = a.rate or (4.0 if heavy else 15.0)
    n_paced = 4 * int(rate * (10 if q else 30) // 4)  # whole Arrow messages of 4
    fmt = "JPEG" if a.jpeg else "PNG"
    imgs = images(max(n_batch, n_paced), fmt)
    recs = json_records(imgs)
    arrow = arrow_messages(imgs[:n_batch])
    script = str(Path(__file__).resolve())
    common = {"bootstrap": bootstrap, "dfs": str(dfs), "model": name,
              "idempotent": a.idempotent, "jpeg": a.jpeg}
    run = {"batch_size": MODEL_BATCH, "max_wait_ms": 20}
    print(f"\n== {family}: {n_batch} images/throughput run, {fmt}, "
          f"{len(recs[0])} B a JSON record, {len(arrow[0])} B an Arrow message of "
          f"{ARROW_ROWS} ==", flush=True)
    results: dict[str, dict[str, Any]] = {}

    def want(what: str) -> bool:
        return not a.only or what in a.only.split(",")

    alone_k, again_k = "model alone, decoded (decode excluded)", "model alone, decoded, again"
    dec_k = "model alone + decode (Pillow threads)"
    json_k, arrow_k = "headrace JSON base64", f"headrace Arrow ({ARROW_ROWS} images/msg)"
    kml_k, app_k = "kafka-ml loop (JSON base64)", "per-message app (JSON base64)"
    mls_k = "mlserver kafka (V2 JSON base64)"
    if want("model"):
        results[alone_k] = c.run_child(script, "model", rows=n_batch, **run, **common)
        results[dec_k] = c.run_child(script, "model-decode", rows=n_batch, **run, **common)
    if want("headrace"):
        s, i, o = c.stream_topics(bootstrap, "j")
        c.load_topic(bootstrap, i, recs[:n_batch], hdr.JSON)
        results[json_k] = c.run_child(script, "headrace", stream=s, rows=n_batch, **run,
                                      **common)
        s, i, o = c.stream_topics(bootstrap, "a")
        c.load_topic(bootstrap, i, arrow, hdr.ARROW, key_prefix="b")
        results[arrow_k] = c.run_child(script, "headrace", stream=s, rows=n_batch, **run,
                                       **common)
    if "shadow" in a.only.split(","):  # opt-in: the scorer with a shadow candidate, off/on
        for shadow in (False, True):
            s, i, o = c.stream_topics(bootstrap, "w")
            c.load_topic(bootstrap, i, recs[:n_batch], hdr.JSON)
            results[f"{json_k}, shadow {'on' if shadow else 'off'}"] = c.run_child(
                script, "headrace", stream=s, rows=n_batch, shadow=shadow, **run, **common)
    if want("kafka-ml"):
        s, i, o = c.stream_topics(bootstrap, "k")
        c.load_topic(bootstrap, i, recs[:n_kml], hdr.JSON)
        results[kml_k] = c.run_child(script, "kafka-ml", input=i, output=o, rows=n_kml,
                                     **common)
    if want("app"):
        s, i, o = c.stream_topics(bootstrap, "m")
        c.load_topic(bootstrap, i, recs[:n_app], hdr.JSON)
        results[app_k] = c.run_child(script, "app", input=i, output=o, rows=n_app, **common)
    peer = mlserver_peer.available()
    if peer is not None:
        print(f"mlserver: skipped ({peer})")
    elif want("mlserver"):
        s, i, o = c.stream_topics(bootstrap, "s")
        results[mls_k] = c.run_child(script, "mlserver", input=i, output=o, rows=2 * n_app,
                                     self_send=True, **run, **common)
    if want("model"):  # again: the box is shared, this brackets the others
        results[again_k] = c.run_child(script, "model", rows=n_batch, **run, **common)
    print()
    c.table(results, "images", alone_k)
    r = {k: v["rows"] / max(v["seconds"], 1e-9) for k, v in results.items() if "error" not in v}
    alone = (r[alone_k] + r[again_k]) / 2 if again_k in r and alone_k in r else None
    dec = r.get(dec_k)
    if alone:
        print(f"model alone before / after the others: {r[alone_k]:.1f} / {r[again_k]:.1f} "
              "images/s (the ratios below use their mean)")
    for k in (json_k, arrow_k, mls_k):
        if k in r and alone and dec:
            print(f"{k} / model alone: {r[k] / alone:.2f} (decode excluded), "
                  f"{r[k] / dec:.2f} (decode included)")
    kml = r.get(kml_k)
    if kml:
        print("x kafka-ml loop: " + ", ".join(f"{k} {v / kml:,.1f}x" for k, v in r.items()))
        print(f"(kafka-ml over {n_kml} records, per-message app over {n_app}: unbatched loops, "
              "their rate does not grow with the count)")
    print()
    if not want("latency"):
        return
    lat: dict[str, tuple[float, float, dict[str, Any]]] = {}
    vals = recs[:n_paced]
    lat[json_k] = c.paced(script, "headrace", vals, hdr.JSON, 1, rate, batch_size=MODEL_BATCH,
                          max_wait_ms=20, **common)
    lat["headrace Arrow (4 images/msg)"] = c.paced(
        script, "headrace", arrow_messages(imgs[:n_paced], 4), hdr.ARROW, 4, rate,
        batch_size=MODEL_BATCH, max_wait_ms=20, **common)
    for k, name_ in ((app_k, "app"), (kml_k, "kafka-ml")):
        if r.get(k, 0.0) > 1.2 * rate:
            lat[k] = c.paced(script, name_, vals, hdr.JSON, 1, rate, **common)
    if peer is None and want("mlserver"):
        lat[mls_k] = c.paced(
            script, "mlserver", mlserver_peer.requests(imgs[:n_paced]), "application/json", 1,
            rate, headers=mlserver_peer.HEADERS, batch_size=MODEL_BATCH, max_wait_ms=20,
            **common)
    c.latency_table(lat, rate, "images")
    print("(a per-message loop slower than 1.2x the offered rate is left out: its queue, and "
          "so its latency, grows without bound)")


def gpu_resnet(a: argparse.Namespace, bootstrap: str, dfs: Path) -> None:
    """ResNet-50 on the GPU: the scorer (Arrow) vs the model alone; 17.9 images/s per K80 pod is
    the public REST figure."""
    import tensorflow as tf

    if not tf.config.list_physical_devices("GPU"):
        print("\n--gpu: no GPU visible (tf.config.list_physical_devices('GPU') is empty); "
              "ResNet-50 variant skipped")
        return
    from headrace.streams import headers as hdr

    publish(dfs, "resnet50")
    n = 2000 if a.quick else 10000
    from PIL import Image

    big = []
    for b in images(64):
        buf = io.BytesIO()
        Image.open(io.BytesIO(b)).resize((224, 224)).save(buf, format="JPEG", quality=90)
        big.append(buf.getvalue())
    imgs = [big[i % len(big)] for i in range(n)]
    script = str(Path(__file__).resolve())
    common = {"bootstrap": bootstrap, "dfs": str(dfs), "model": "resnet50", "device": "gpu"}
    res = {"model alone, decoded": c.run_child(script, "model", rows=n, batch_size=128,
                                               **common),
           "model alone + decode": c.run_child(script, "model-decode", rows=n, batch_size=128,
                                               **common)}
    s, i, _ = c.stream_topics(bootstrap, "g")
    c.load_topic(bootstrap, i, arrow_messages(imgs, 32), hdr.ARROW, key_prefix="g")
    res["headrace Arrow (32 JPEG/msg)"] = c.run_child(script, "headrace", stream=s, rows=n,
                                                      batch_size=128, max_wait_ms=20,
                                                      **common)
    print()
    c.table(res, "images", "model alone, decoded")
    hr = res["headrace Arrow (32 JPEG/msg)"]
    rate = hr["rows"] / max(hr["seconds"], 1e-9)
    print(f"headrace / 17.9 images/s per K80 pod (public REST figure) = {rate / 17.9:.1f}x")


def parent_main(a: argparse.Namespace) -> None:
    from headrace.streams.broker import EmbeddedBroker

    broker = None
    bootstrap = a.bootstrap
    if not bootstrap:
        broker = EmbeddedBroker().start()
        bootstrap = broker.bootstrap
    dfs = Path(tempfile.mkdtemp(prefix="bench-images-dfs-"))
    try:
        print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; broker {bootstrap}; "
              f"cpus {os.cpu_count()}; load {os.getloadavg()[0]:.1f}; producers "
              f"{'idempotent' if a.idempotent else 'non-idempotent'}", flush=True)
        for family in a.models.split(","):
            publish(dfs, family, candidate="shadow" in a.only.split(","))
            bench_model(family, a, bootstrap, dfs)
        if a.gpu:
            gpu_resnet(a, bootstrap, dfs)
    finally:
        if broker is not None:
            broker.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run (a few minutes on 2 cores)")
    p.add_argument("--models", default="mobilenet_v2,cnn", help="mobilenet_v2, cnn (comma list)")
    p.add_argument("--rate", type=float, default=0.0,
                   help="offered images/s for the latency runs (default 4 MobileNetV2, 15 cnn)")
    p.add_argument("--only", default="",
                   help="contenders to run: model,headrace,kafka-ml,app,mlserver,latency; "
                        "shadow (only when named): headrace JSON with a shadow candidate "
                        "off and on")
    p.add_argument("--jpeg", action="store_true", help="JPEG instead of PNG")
    p.add_argument("--gpu", action="store_true", help="ResNet-50 on the GPU, if one is visible")
    p.add_argument("--bootstrap", default=None, help="a Kafka to use (default: embedded)")
    p.add_argument("--idempotent", action="store_true",
                   help="idempotent producers (the scorer's default); see bench_scoring.py")
    p.add_argument("--contender", default=None, help=argparse.SUPPRESS)
    p.add_argument("--shadow", action="store_true", help=argparse.SUPPRESS)
    for opt in ("input", "output", "stream", "dfs", "model"):
        p.add_argument(f"--{opt}", default=None, help=argparse.SUPPRESS)
    p.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    p.add_argument("--self-send", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rows", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--batch-size", type=int, default=MODEL_BATCH, help=argparse.SUPPRESS)
    p.add_argument("--max-wait-ms", type=int, default=20, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.contender:
        child_main(a)
    else:
        parent_main(a)


if __name__ == "__main__":
    main()
