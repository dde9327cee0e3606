"""Text scoring benchmark: a `text` model (TextVectorization + Embedding + pooling, Keras) on a
generated intent corpus; the same contenders as bench_images.py, in rows/s.

  kafka-ml        poll one message, json.loads, model.predict it, json.dumps, produce; flush +
                  commit synchronously every 16 messages (bounded count)
  per-message app consume one message, json.loads, ``model(x)``, produce; auto commit
  headrace JSON   the real scorer, {"text": "..."} one a message
  headrace Arrow  the real scorer, Arrow IPC messages of ARROW_ROWS rows, a string column
  model alone     the loaded model's inputs_fn on in-memory string batches (nothing to decode)
  mlserver        Seldon MLServer's Kafka mode, custom runtime, same Keras file (if its venv
                  exists: bench/mlserver_peer.py)

Run: ``python bench/bench_text.py [--quick]``.
"""

from __future__ import annotations

import argparse
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

MODEL = "benchtext"
ARROW_ROWS = 1024
BATCH = 1024
MAX_TOKENS = 16
INTENTS = {
    "book_flight": ("book a flight to {city} on {day}", "i need a plane ticket to {city}",
                    "fly me to {city} {day} morning"),
    "weather": ("what is the weather in {city} {day}", "will it rain in {city}",
                "is it cold in {city} on {day}"),
    "play_music": ("play some {genre} music", "put on {genre} from the {decade}",
                   "i want to hear {genre}"),
    "set_alarm": ("wake me up at {hour} on {day}", "set an alarm for {hour}",
                  "alarm at {hour} please"),
    "order_food": ("order a {food} to my place", "i am hungry get me {food}",
                   "deliver {food} at {hour}"),
    "cancel": ("cancel my {thing}", "stop the {thing} now", "never mind about the {thing}"),
}
SLOTS = {
    "city": ("paris", "berlin", "lima", "osaka", "nairobi", "toronto", "oslo", "quito"),
    "day": ("monday", "tuesday", "friday", "saturday", "tomorrow", "today"),
    "genre": ("jazz", "rock", "salsa", "techno", "folk", "opera"),
    "decade": ("sixties", "eighties", "nineties"),
    "hour": ("six", "seven thirty", "noon", "midnight", "five fifteen"),
    "food": ("pizza", "ramen", "salad", "curry", "burger"),
    "thing": ("order", "alarm", "flight", "booking", "subscription"),
}
CLASSES = tuple(INTENTS)


def corpus(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    names = list(INTENTS)
    for _ in range(n):
        tpl = INTENTS[names[rng.integers(len(names))]][rng.integers(3)]
        out.append(tpl.format(**{k: v[rng.integers(len(v))] for k, v in SLOTS.items()}))
    return out


def publish(root: Path) -> None:
    import keras

    from headrace.store.manifest import Manifest
    from headrace.store.signature import InputKind, ModelInput, ModelOutput, OutputKind
    from headrace.store.versions import publish as put
    from headrace.store.versions import set_alias

    keras.utils.set_random_seed(0)
    vec = keras.layers.TextVectorization(max_tokens=2000, output_sequence_length=MAX_TOKENS)
    vec.adapt(corpus(2000, seed=1))
    inp = keras.Input((1,), dtype="string", name="text")
    x = keras.layers.Embedding(2000, 32)(vec(inp))
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dense(32, activation="relu")(x)
    model = keras.Model(inp, keras.layers.Dense(len(CLASSES), activation="softmax")(x))
    m = Manifest(name=MODEL, framework="tensorflow", task="classifier", features=(), label="y",
                 classes=CLASSES, family="text",
                 inputs=(ModelInput(name="text", kind=InputKind.TEXT, dtype="string",
                                    max_length=64),),
                 outputs=(ModelOutput(name="intent", kind=OutputKind.CLASSES,
                                      classes=CLASSES),))
    mv = put(root, m, lambda d: model.save(d / "model.keras"))
    set_alias(root, MODEL, mv.version)


DEFAULT_MODEL = "benchtextdefault"


def publish_default(root: Path) -> None:
    """The model Headrace's ``text`` family trains at its default sizes (``ModelSpec``'s
    ``embedding_dim`` 64, ``max_tokens`` 20,000, ``max_length`` 64, ``hidden`` 64), built by the
    trainer's own Keras builder: the corpus' words plus filler words make the full vocabulary.
    Untrained (random weights): the bench measures time, not accuracy."""
    import keras

    from headrace.codecs.stats import InputStats
    from headrace.contracts import ModelSpec
    from headrace.store import tokens
    from headrace.store.manifest import Manifest
    from headrace.store.signature import InputKind, ModelInput, ModelOutput, OutputKind
    from headrace.store.versions import publish as put
    from headrace.store.versions import set_alias
    from headrace.trainers.backends.keras_families import build_keras
    from headrace.trainers.inputs import ModelPlan

    keras.utils.set_random_seed(0)
    spec = ModelSpec(model="text")
    words = tokens.learn_vocabulary(corpus(2000, seed=1), max_tokens=spec.max_tokens)
    vocab = (words + [f"w{i}" for i in range(spec.max_tokens - 2 - len(words))])
    inp = ModelInput(name="text", kind=InputKind.TEXT, dtype="string",
                     max_length=spec.max_length,
                     preprocessing=("lowercase", "strip_punctuation", "vocabulary"))
    out = ModelOutput(name="intent", kind=OutputKind.CLASSES, classes=CLASSES)
    plan = ModelPlan("text", (inp,), (out,), len(CLASSES),
                     stats={"text": InputStats(vocabulary=tuple(vocab))})
    model = build_keras("text", spec=spec, plan=plan)
    m = Manifest(name=DEFAULT_MODEL, framework="tensorflow", task="classifier", features=(),
                 label="y", classes=CLASSES, family="text", inputs=(inp,), outputs=(out,))
    mv = put(root, m, lambda d: model.save(d / "model.keras"))
    set_alias(root, DEFAULT_MODEL, mv.version)


def json_records(texts: list[str]) -> list[bytes]:
    return [json.dumps({"text": t}).encode() for t in texts]


def arrow_messages(texts: list[str], rows: int = ARROW_ROWS) -> list[bytes]:
    import pyarrow as pa

    from headrace.streams.codecs import encode_arrow

    return [encode_arrow(pa.table({"text": pa.array(texts[s:s + rows], pa.string())}))
            for s in range(0, len(texts), rows)]


def _keras(a: argparse.Namespace) -> Any:
    import keras

    return keras.saving.load_model(_keras_file(a), compile=False)


def _keras_file(a: argparse.Namespace) -> Path:
    from headrace.store.versions import resolve

    return Path(resolve(Path(a.dfs), MODEL).path / "model.keras")


# -- contenders ------------------------------------------------------------------------------------
def contender_kafka_ml(a: argparse.Namespace) -> dict[str, Any]:
    import tensorflow as tf

    model = _keras(a)
    # predict refuses object arrays: a string tensor
    return c.kafka_ml_loop(a, lambda v: model.predict(
        tf.constant([[json.loads(v)["text"]]]), verbose=0)[0], CLASSES)


def contender_app(a: argparse.Namespace) -> dict[str, Any]:
    import tensorflow as tf

    model = _keras(a)
    model(tf.constant([["warm up"]]), training=False)
    return c.per_message_app_loop(a, lambda v: np.asarray(model(
        tf.constant([[json.loads(v)["text"]]]), training=False))[0], CLASSES)


def contender_headrace(a: argparse.Namespace) -> dict[str, Any]:
    return c.headrace_scorer(bootstrap=a.bootstrap, dfs=a.dfs, stream=a.stream,
                             model=a.model or MODEL,
                             rows=a.rows, batch_size=a.batch_size, max_wait_ms=a.max_wait_ms,
                             idempotent=a.idempotent)


def contender_model(a: argparse.Namespace) -> dict[str, Any]:
    from headrace.scorers.engine.models import load_model

    model = load_model(root=Path(a.dfs), name=a.model or MODEL, alias="production",
                       device="cpu", max_batch=a.batch_size)
    fn = model.inputs_fn
    assert fn is not None
    x = np.asarray(corpus(a.batch_size), object)
    return c.timed_batches(lambda: len(fn({"text": x})[0]), a.rows)


def contender_mlserver(a: argparse.Namespace) -> dict[str, Any]:
    import mlserver_peer

    return mlserver_peer.run(a, kind="text", side=0, keras_file=_keras_file(a),
                             make_values=lambda n: [t.encode() for t in corpus(n)])


CONTENDERS = {"kafka-ml": contender_kafka_ml, "app": contender_app,
              "headrace": contender_headrace, "model": contender_model,
              "mlserver": contender_mlserver}


def child_main(a: argparse.Namespace) -> None:
    result = CONTENDERS[a.contender](a)
    result["rss_mib"] = c._rss_mib() + result.pop("extra_rss_mib", 0.0)
    print("RESULT " + json.dumps(result), flush=True)


# -- parent ----------------------------------------------------------------------------------------
def parent_main(a: argparse.Namespace) -> None:
    import mlserver_peer

    from headrace.streams import headers as hdr
    from headrace.streams.broker import EmbeddedBroker

    q = a.quick
    n_batch = 100_000 if q else 400_000
    n_arrow = 200 * ARROW_ROWS if q else 800 * ARROW_ROWS
    n_kml = 48 if q else 320
    n_app = 400 if q else 2000
    n_mls = 1000 if q else 5000
    rate = a.rate
    n_paced = int(rate * (8 if q else 30))
    broker = None
    bootstrap = a.bootstrap
    if not bootstrap:
        broker = EmbeddedBroker().start()
        bootstrap = broker.bootstrap
    dfs = Path(tempfile.mkdtemp(prefix="bench-text-dfs-"))
    script = str(Path(__file__).resolve())
    try:
        print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; broker {bootstrap}; "
              f"cpus {os.cpu_count()}; load {os.getloadavg()[0]:.1f}", flush=True)
        publish(dfs)
        texts = corpus(max(n_batch, n_arrow, n_paced))
        recs = json_records(texts)
        common = {"bootstrap": bootstrap, "dfs": str(dfs), "idempotent": a.idempotent}
        results: dict[str, dict[str, Any]] = {}
        default: dict[str, dict[str, Any]] = {}  # the default-size model: its own table

        def want(what: str) -> bool:
            return not a.only or what in a.only.split(",")

        alone_k = "model alone (string batches of 1024)"
        if want("model"):
            results[alone_k] = c.run_child(script, "model", rows=n_arrow, batch_size=BATCH,
                                           **common)
        if want("headrace"):
            s, i, _ = c.stream_topics(bootstrap, "j")
            c.load_topic(bootstrap, i, recs[:n_batch], hdr.JSON)
            results["headrace JSON"] = c.run_child(script, "headrace", stream=s, rows=n_batch,
                                                   batch_size=8192, max_wait_ms=10, **common)
            s, i, _ = c.stream_topics(bootstrap, "a")
            c.load_topic(bootstrap, i, arrow_messages(texts[:n_arrow]), hdr.ARROW,
                         key_prefix="b")
            results[f"headrace Arrow ({ARROW_ROWS} rows/msg)"] = c.run_child(
                script, "headrace", stream=s, rows=n_arrow, batch_size=8192, max_wait_ms=10,
                **common)
        default_k = "model alone (string batches of 1024)"
        if want("default"):  # an additional model: the text family at its default sizes
            publish_default(dfs)
            default[default_k] = c.run_child(
                script, "model", rows=n_arrow // 4, batch_size=BATCH, model=DEFAULT_MODEL,
                **common)
            s, i, _ = c.stream_topics(bootstrap, "dj")
            c.load_topic(bootstrap, i, recs[:n_batch], hdr.JSON)
            default["headrace JSON"] = c.run_child(
                script, "headrace", stream=s, rows=n_batch, batch_size=8192, max_wait_ms=10,
                model=DEFAULT_MODEL, **common)
            s, i, _ = c.stream_topics(bootstrap, "da")
            c.load_topic(bootstrap, i, arrow_messages(texts[:n_arrow]), hdr.ARROW,
                         key_prefix="b")
            default[f"headrace Arrow ({ARROW_ROWS} rows/msg)"] = (
                c.run_child(script, "headrace", stream=s, rows=n_arrow, batch_size=8192,
                            max_wait_ms=10, model=DEFAULT_MODEL, **common))
        if want("kafka-ml"):
            s, i, o = c.stream_topics(bootstrap, "k")
            c.load_topic(bootstrap, i, recs[:n_kml], hdr.JSON)
            results["kafka-ml loop"] = c.run_child(script, "kafka-ml", input=i, output=o,
                                                   rows=n_kml, **common)
        if want("app"):
            s, i, o = c.stream_topics(bootstrap, "m")
            c.load_topic(bootstrap, i, recs[:n_app], hdr.JSON)
            results["per-message app"] = c.run_child(script, "app", input=i, output=o,
                                                     rows=n_app, **common)
        peer = mlserver_peer.available()
        if peer is not None:
            print(f"mlserver: skipped ({peer})")
        elif want("mlserver"):
            s, i, o = c.stream_topics(bootstrap, "s")
            results["mlserver kafka (V2 JSON)"] = c.run_child(
                script, "mlserver", input=i, output=o, rows=n_mls, self_send=True,
                batch_size=BATCH, max_wait_ms=10, **common)
        print()
        c.table(results, "rows", alone_k if alone_k in results else None)
        if default:
            print("\nthe text family at its default sizes (embedding 64, 20,000 tokens, 64 a "
                  "row), an additional model:")
            c.table(default, "rows", default_k if default_k in default else None)
        r = {k: v["rows"] / max(v["seconds"], 1e-9) for k, v in results.items()
             if "error" not in v}
        kml = r.get("kafka-ml loop")
        if kml:
            print("x kafka-ml loop: " + ", ".join(f"{k} {v / kml:,.1f}x" for k, v in r.items()))
        print(f"(kafka-ml over {n_kml} records, per-message app over {n_app}, mlserver over "
              f"{n_mls}: extrapolated as steady rates)")
        print()
        if not want("latency"):
            return
        lat: dict[str, tuple[float, float, dict[str, Any]]] = {}
        vals = recs[:n_paced]
        lat["headrace JSON"] = c.paced(script, "headrace", vals, hdr.JSON, 1, rate,
                                       batch_size=8192, max_wait_ms=5, **common)
        lat["headrace Arrow (10 rows/msg)"] = c.paced(
            script, "headrace", arrow_messages(texts[:n_paced], 10), hdr.ARROW, 10, rate,
            batch_size=8192, max_wait_ms=5, **common)
        for k, name in (("per-message app", "app"), ("kafka-ml loop", "kafka-ml")):
            if r.get(k, 0.0) > 1.2 * rate:
                lat[k] = c.paced(script, name, vals, hdr.JSON, 1, rate, **common)
        if peer is None and want("mlserver"):
            lat["mlserver kafka (V2 JSON)"] = c.paced(
                script, "mlserver", mlserver_peer.requests([t.encode() for t in
                                                            texts[:n_paced]], "text"),
                "application/json", 1, rate, headers=mlserver_peer.HEADERS, batch_size=BATCH,
                max_wait_ms=10, **common)
        c.latency_table(lat, rate, "rows")
        print("(a loop that cannot sustain 1.2x the offered rate is left out of the latency run)")
    finally:
        if broker is not None:
            broker.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run (a few minutes on 2 cores)")
    p.add_argument("--only", default="",
                   help="contenders to run: model,headrace,kafka-ml,app,mlserver,latency; "
                        "default: the same model alone and headrace runs with the text family "
                        "at its default sizes (an additional model)")
    p.add_argument("--rate", type=float, default=200.0, help="offered rows/s, latency runs")
    p.add_argument("--bootstrap", default=None, help="a Kafka to use (default: embedded)")
    p.add_argument("--idempotent", action="store_true", help="idempotent producers")
    p.add_argument("--contender", default=None, help=argparse.SUPPRESS)
    for opt in ("input", "output", "stream", "dfs", "model"):
        p.add_argument(f"--{opt}", default=None, help=argparse.SUPPRESS)
    p.add_argument("--rows", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--batch-size", type=int, default=BATCH, help=argparse.SUPPRESS)
    p.add_argument("--max-wait-ms", type=int, default=10, help=argparse.SUPPRESS)
    p.add_argument("--self-send", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.contender:
        child_main(a)
    else:
        parent_main(a)


if __name__ == "__main__":
    main()
