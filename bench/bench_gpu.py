"""GPU scoring benchmark: the real scorer on a GPU (and on the CPU cores) against its ceilings.

Models: MobileNetV2, ResNet-50 and ResNet-152 from ``keras.applications`` (random weights, ten
classes, SIZE x SIZE x 3 input), published to a temporary DFS store with a signature (one
``image`` input), scored on the Keras runtime ``--runtime`` (torch by default: the GPU machines
have no TensorFlow). Images: synthetic photographs (smooth colour fields, edges and sensor
noise, so that PNG and JPEG compress as photos do), encoded once as PNG and as JPEG (quality 90),
loaded into one embedded-broker stream per format.

Measured in one run, each in its own process, for every (device, model, format):

  scorer        the real scorer (``headrace.scorers.serving.Scorer``: its batching, decode
                ahead, image decode thread pool, runtime adapter, producer) reading the
                preloaded stream (static partition 0, its group rewound first); images/s from
                its first batch out to the last record (steady state)
  model alone   the runtime's loaded model (``load_ref`` → ``inputs_fn``) on decoded float32
                batches in host memory: the host-to-device copy included, decode excluded
  torchvision   the same architecture in native PyTorch (torchvision, eager, channels_last,
                ``inference_mode``), same batch, same copy from host memory: what the runtime's
                model alone is compared with
  decode alone  the scorer's image decode (``headrace.store.images.decode_batch``, its thread
                pool sized to the CPU limit) on the stream's bytes: images/s
  pass-through  the stream without decode or model: consume the same messages, produce one
                small JSON record each, commit: the broker and client ceiling

The scorer's ceiling is min(model alone, decode alone, pass-through); the table gives the
scorer's share of min(model alone, decode alone), and the runtime's model alone over
torchvision. ``--quick``: tiny sizes on whatever device there is (a smoke test of this script).

Run (a GPU machine, recipe in bench/GPU.md): ``python bench/bench_gpu.py [--quick]
[--models mobilenet_v2,resnet50,resnet152] [--formats png,jpeg] [--devices gpu,cpu]
[--runtime torch] [--out results.json]``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CLASSES = tuple(str(d) for d in range(10))
DISTINCT = 64  # distinct images, cycled through the stream
ARCH = {"mobilenet_v2": ("MobileNetV2", "mobilenet_v2"), "resnet50": ("ResNet50", "resnet50"),
        "resnet152": ("ResNet152", "resnet152")}  # family -> (keras.applications, torchvision)
CONTENT = {"png": "image/png", "jpeg": "image/jpeg"}


# -- data --------------------------------------------------------------------------------------
def photos(n: int, size: int, fmt: str, seed: int = 0) -> list[bytes]:
    """``n`` encoded size x size RGB 'photographs': a smooth random colour field (upscaled
    8x8 noise), a few hard edges and mild sensor noise, so they compress as photos do."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        low = Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8), "RGB")
        field = np.asarray(low.resize((size, size), Image.Resampling.BICUBIC), np.float32)
        r = rng.integers(size // 8, size // 2)
        cy, cx = rng.integers(0, size, 2)
        yy, xx = np.mgrid[:size, :size]
        field[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] *= 0.5  # a disc: an edge
        field += rng.normal(0, 4, field.shape)
        im = Image.fromarray(np.clip(field, 0, 255).astype(np.uint8), "RGB")
        buf = io.BytesIO()
        im.save(buf, format=fmt.upper(), **({"quality": 90} if fmt == "jpeg" else {}))
        out.append(buf.getvalue())
    return out


# -- children ----------------------------------------------------------------------------------
def _keras(runtime: str) -> Any:
    os.environ["KERAS_BACKEND"] = runtime
    import keras

    return keras


def child_publish(a: argparse.Namespace) -> dict[str, Any]:
    """Build and publish every model, on the CPU (the GPU stays free for the measurements)."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    params = {m: _publish(a, m) for m in a.model.split(",")}
    return {"rows": 1, "seconds": 1.0, "params": params}


def _publish(a: argparse.Namespace, family: str) -> int:
    keras = _keras(a.runtime)
    from headrace.store.manifest import Manifest
    from headrace.store.signature import InputKind, ModelInput, ModelOutput, OutputKind
    from headrace.store.versions import publish, set_alias

    keras.utils.set_random_seed(0)
    app = getattr(keras.applications, ARCH[family][0])
    inp = keras.Input((a.size, a.size, 3), name="image")
    x = keras.layers.Rescaling(1.0 / 255)(inp)
    body = app(input_shape=(a.size, a.size, 3), weights=None, classes=len(CLASSES),
               classifier_activation="softmax")
    model = keras.Model(inp, body(x))
    name = family.replace("_", "")
    m = Manifest(name=name, framework="tensorflow", task="classifier", features=(), label="y",
                 classes=CLASSES, family=family,
                 inputs=(ModelInput(name="image", kind=InputKind.IMAGE, height=a.size,
                                    width=a.size, channels=3, shape=(a.size, a.size, 3)),),
                 outputs=(ModelOutput(name="y", kind=OutputKind.CLASSES, classes=CLASSES),))
    mv = publish(Path(a.dfs), m, lambda d: model.save(d / "model.keras"))
    set_alias(Path(a.dfs), name, mv.version)
    return int(model.count_params())


def _device(a: argparse.Namespace) -> str:
    return "gpu:0" if a.device == "gpu" else "cpu"


def _decoded(a: argparse.Namespace, n: int) -> np.ndarray:
    from headrace.store.images import ImageSpec, decode_batch

    blobs = photos(min(n, DISTINCT), a.size, a.format)
    batch = decode_batch([blobs[i % len(blobs)] for i in range(n)], ImageSpec(a.size, a.size, 3))
    return batch.pixels


def _timed(call: Any, rows_per_call: int, seconds: float) -> dict[str, Any]:
    call()  # warm: shapes traced, memory allocated
    call()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds or n == 0:
        call()
        n += rows_per_call
    return {"rows": n, "seconds": time.perf_counter() - t0}


def child_alone(a: argparse.Namespace) -> dict[str, Any]:
    """The runtime's model alone, then torchvision's, in one process (one import of each)."""
    model = _model_alone(a)
    native = _torchvision(a)
    return {**model, "torchvision": native}


def _model_alone(a: argparse.Namespace) -> dict[str, Any]:
    from headrace.scorers.adapters import select_runtime

    select_runtime(a.runtime)
    from headrace.scorers.engine.models import load_ref

    m = load_ref(root=Path(a.dfs), ref=a.model.replace("_", ""), device=_device(a),
                 max_batch=a.batch)
    assert m.inputs_fn is not None
    x = {"image": _decoded(a, a.batch)}
    fn = m.inputs_fn
    return _timed(lambda: fn(x), a.batch, a.seconds)


def _torchvision(a: argparse.Namespace) -> dict[str, Any]:
    import torch
    import torchvision

    dev = "cuda" if a.device == "gpu" else "cpu"
    net = getattr(torchvision.models, ARCH[a.model][1])(weights=None, num_classes=len(CLASSES))
    net = net.eval().to(dev, memory_format=torch.channels_last)
    host = torch.from_numpy(np.ascontiguousarray(
        _decoded(a, a.batch).transpose(0, 3, 1, 2) / 255.0, np.float32))
    if dev == "cuda":
        host = host.pin_memory()

    def call() -> None:
        with torch.inference_mode():
            x = host.to(dev, non_blocking=True).contiguous(memory_format=torch.channels_last)
            net(x).cpu()

    out = _timed(call, a.batch, a.seconds)
    out["per_s"] = round(out["rows"] / max(out["seconds"], 1e-9), 1)
    return out


def child_ceilings(a: argparse.Namespace) -> dict[str, Any]:
    """Decode alone, then pass-through, of one format."""
    return {**_decode_alone(a), "pass_through": _passthrough(a)}


def _decode_alone(a: argparse.Namespace) -> dict[str, Any]:
    from headrace.core.cpus import cpu_limit
    from headrace.store.images import ImageSpec, decode_batch

    blobs = photos(DISTINCT, a.size, a.format)
    batch = [blobs[i % len(blobs)] for i in range(a.batch)]
    spec = ImageSpec(a.size, a.size, 3)
    out = _timed(lambda: decode_batch(batch, spec), a.batch, a.seconds)
    return {**out, "threads": cpu_limit(), "bytes_per_image": float(np.mean(list(map(len,
                                                                                  blobs))))}


def _rewind(bootstrap: str, stream: str) -> None:
    """The scorer's group starts this run from offset 0 (the stream is shared by runs)."""
    from confluent_kafka import Consumer, TopicPartition

    from headrace.streams.topics import data_topic, scorer_group

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": scorer_group(stream),
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(data_topic(stream), 0, 0)], asynchronous=False)
    finally:
        c.close()


def child_scorer(a: argparse.Namespace) -> dict[str, Any]:
    import threading

    from headrace.core.settings import load_settings
    from headrace.scorers.engine.settings import load_scorer_settings
    from headrace.scorers.serving import Scorer

    _rewind(a.bootstrap, a.stream)
    settings = load_settings(bootstrap=a.bootstrap, dfs_root=a.dfs, streams=[a.stream],
                             partitions=1)
    s = load_scorer_settings(
        stream=a.stream, model=a.model.replace("_", ""), partitions="0", http_port=0,
        http_host="127.0.0.1", batch_size=a.batch, max_wait_ms=20, device=_device(a),
        runtime=a.runtime, max_batch_bytes=a.batch * a.size * a.size * 3 * 4 + (1 << 20),
        idempotent=False, decode_processes=0)
    scorer = Scorer(settings, s)
    stop = threading.Event()
    t = threading.Thread(target=scorer.run, args=(stop,), daemon=True)
    t.start()
    reg = scorer.metrics.registry

    def scored() -> float:
        if not t.is_alive():
            raise SystemExit("the scorer died")
        return reg.get_sample_value("headrace_scorer_rows_total", {"stream": a.stream}) or 0.0

    while (first := scored()) == 0:
        time.sleep(0.005)
    t0 = time.perf_counter()
    while scored() < a.records:
        time.sleep(0.02)
    took = time.perf_counter() - t0
    stop.set()
    t.join(60)
    return {"rows": a.records - first, "seconds": took}


def _passthrough(a: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    from headrace.streams.topics import data_topic, predictions_topic

    group = f"bench-pass-{uuid.uuid4().hex[:8]}"
    c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": group,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 64 << 20})
    p = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 5,
                  "enable.idempotence": False})
    c.assign([TopicPartition(data_topic(a.stream), 0, 0)])
    out = predictions_topic(a.stream) + "-pass"
    n, t0 = 0, None
    while n < a.records:
        msgs = c.consume(a.batch, 1.0)
        if t0 is None and msgs:
            t0 = time.perf_counter()
        for m in msgs:
            if m.error():
                continue
            while True:
                try:
                    p.produce(out, b'{"label":"0","scores":[1.0]}', m.key())
                    break
                except BufferError:
                    p.poll(0.01)
            n += 1
        p.poll(0)
        if msgs:
            c.commit(asynchronous=True)
    p.flush(30)
    c.close()
    took = time.perf_counter() - (t0 or time.perf_counter())
    return {"rows": n, "seconds": took, "per_s": round(n / max(took, 1e-9), 1)}


CHILDREN = {"publish": child_publish, "alone": child_alone, "ceilings": child_ceilings,
            "scorer": child_scorer}


# -- parent ------------------------------------------------------------------------------------
def _gpu_present() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def _child(a: argparse.Namespace, name: str, **kw: Any) -> dict[str, Any]:
    """Run one measurement in its own process; its stderr goes to a log under ``--logs``,
    whose tail is printed when it fails."""
    import subprocess

    args = {"dfs": a.dfs, "bootstrap": a.bootstrap, "runtime": a.runtime, "size": a.size,
            "seconds": a.seconds, **kw}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--contender", name]
    for k, v in args.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    log = Path(a.logs) / f"{name}-{kw.get('device', '')}-{kw.get('model', '')}-" \
                          f"{kw.get('format', '')}.log"
    t0 = time.perf_counter()
    out: dict[str, Any] = {"rows": 0, "seconds": 1.0}
    with open(log, "w") as err:
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                  timeout=a.child_timeout)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if lines:
                out = json.loads(lines[-1][7:])
            else:
                out["error"] = f"exit {proc.returncode}"
        except subprocess.TimeoutExpired:
            out["error"] = f"over {a.child_timeout:.0f}s"
    if "error" in out:
        print(log.read_text()[-2500:], flush=True)
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    rate = out["rows"] / max(out["seconds"], 1e-9) if out.get("rows") else 0.0
    out["per_s"] = round(rate, 1)
    print(f"  {name:<12} {kw.get('device', ''):<4} {kw.get('model', ''):<13} "
          f"{kw.get('format', ''):<5} {rate:>10.1f}/s  {out.get('error', '')}", flush=True)
    return out


def parent(a: argparse.Namespace) -> dict[str, Any]:
    import _common as c

    from headrace.streams.broker import EmbeddedBroker

    devices = [d for d in a.devices.split(",") if d]
    if "gpu" in devices and not _gpu_present():
        print("no GPU visible (torch.cuda.is_available() is False): CPU only", flush=True)
        devices = [d for d in devices if d != "gpu"] or ["cpu"]
    broker = EmbeddedBroker().start()
    a.bootstrap = broker.bootstrap
    a.dfs = tempfile.mkdtemp(prefix="bench-gpu-dfs-")
    a.logs = a.logs or tempfile.mkdtemp(prefix="bench-gpu-logs-")
    Path(a.logs).mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "runtime": a.runtime, "size": a.size, "cpus": os.cpu_count(),
                              "gpu": _gpu_name(), "runs": []}
    print(f"{report['when']}; {report['gpu'] or 'no GPU'}; {os.cpu_count()} CPUs; runtime "
          f"{a.runtime}; {a.size}x{a.size}", flush=True)
    try:
        streams = {}
        for fmt in a.formats.split(","):
            stream = f"gpu{fmt}{uuid.uuid4().hex[:6]}"
            c.ensure(a.bootstrap, f"data.{stream}", f"predictions.{stream}",
                     f"predictions.{stream}-pass", f"data.{stream}.dlq")
            blobs = photos(DISTINCT, a.size, fmt)
            most = max(a.records_gpu if "gpu" in devices else 0, a.records_cpu)
            c.load_topic(a.bootstrap, f"data.{stream}",
                         [blobs[i % len(blobs)] for i in range(most)], CONTENT[fmt])
            streams[fmt] = stream
            report[f"{fmt}_bytes"] = float(np.mean(list(map(len, blobs))))
        for fmt, stream in streams.items():
            got = _child(a, "ceilings", stream=stream, records=a.records_gpu
                         if "gpu" in devices else a.records_cpu, batch=256, format=fmt)
            report["runs"].append({"what": "decode", "format": fmt, **got})
            report["runs"].append({"what": "pass-through", "format": fmt,
                                   **got.get("pass_through", {})})
        report["params"] = _child(a, "publish", model=a.models).get("params")
        for model in a.models.split(","):
            for device in devices:
                batch = a.batch_gpu if device == "gpu" else a.batch_cpu
                records = a.records_gpu if device == "gpu" else a.records_cpu
                kw = {"model": model, "device": device, "batch": batch}
                first = next(iter(streams))
                got = _child(a, "alone", format=first, **kw)
                report["runs"].append({"what": "model", **kw, **got})
                report["runs"].append({"what": "torchvision", **kw, **got.get("torchvision", {})})
                fmts = streams if device == "gpu" else {f: streams[f] for f in
                                                        a.cpu_formats.split(",") if f in streams}
                fmts = fmts or {first: streams[first]}  # none of --cpu-formats was loaded
                for fmt, stream in fmts.items():
                    report["runs"].append({"what": "scorer", "format": fmt, **kw, **_child(
                        a, "scorer", stream=stream, records=records, format=fmt, **kw)})
    finally:
        broker.stop()
    summarise(report)
    return report


def _gpu_name() -> str | None:
    try:
        import torch

        return str(torch.cuda.get_device_name(0)) if torch.cuda.is_available() else None
    except ImportError:
        return None


def summarise(report: dict[str, Any]) -> None:
    runs = report["runs"]

    def rate(what: str, **kw: Any) -> float:
        for r in runs:
            if r["what"] == what and all(r.get(k) == v for k, v in kw.items()):
                return float(r.get("per_s", 0.0))
        return 0.0

    print("\nimages/s; ceiling = min(model alone, decode alone, pass-through)")
    print(f"{'device':<6} {'model':<13} {'fmt':<5} {'scorer':>9} {'model':>9} {'decode':>9} "
          f"{'pass':>9} {'torchvis':>9} {'scorer/min(m,d)':>16} {'model/tv':>9}")
    for r in runs:
        if r["what"] != "scorer":
            continue
        fmt, dev, model = r["format"], r["device"], r["model"]
        m, d, p = rate("model", device=dev, model=model), rate("decode", format=fmt), \
            rate("pass-through", format=fmt)
        tv = rate("torchvision", device=dev, model=model)
        s = float(r.get("per_s", 0.0))
        share = s / min(m, d) if min(m, d) > 0 else 0.0
        print(f"{dev:<6} {model:<13} {fmt:<5} {s:>9.1f} {m:>9.1f} {d:>9.1f} {p:>9.1f} "
              f"{tv:>9.1f} {share:>16.2f} {m / tv if tv else 0.0:>9.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test of the script")
    p.add_argument("--models", default="mobilenet_v2,resnet50,resnet152")
    p.add_argument("--formats", default="png,jpeg")
    p.add_argument("--devices", default="gpu,cpu")
    p.add_argument("--cpu-formats", default="jpeg", help="formats the CPU scorer reads")
    p.add_argument("--runtime", default="torch", choices=("torch", "jax", "tensorflow"))
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batch-gpu", type=int, default=256)
    p.add_argument("--batch-cpu", type=int, default=64)
    p.add_argument("--records-gpu", type=int, default=8192)
    p.add_argument("--records-cpu", type=int, default=256)
    p.add_argument("--seconds", type=float, default=3.0, help="timed seconds of each ceiling")
    p.add_argument("--child-timeout", type=float, default=300.0)
    p.add_argument("--out", default="", help="write the report as JSON here")
    p.add_argument("--logs", default="", help="the children's stderr (default: a temp dir)")
    # a child's arguments
    p.add_argument("--contender", default="")
    p.add_argument("--dfs", default="")
    p.add_argument("--bootstrap", default="")
    p.add_argument("--stream", default="")
    p.add_argument("--model", default="")
    p.add_argument("--format", default="png")
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--records", type=int, default=0)
    a = p.parse_args()
    if a.contender:
        os.environ.setdefault("KERAS_BACKEND", a.runtime)
        result = CHILDREN[a.contender](a)
        print("RESULT " + json.dumps(result), flush=True)
        return
    if a.quick:
        a.models, a.size, a.batch_gpu, a.batch_cpu = "mobilenet_v2", 32, 64, 16
        a.records_gpu, a.records_cpu, a.seconds = 256, 64, 0.5
    report = parent(a)
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
