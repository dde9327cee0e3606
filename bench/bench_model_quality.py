"""Model quality with NO hyperparameters, on data the defaults were not chosen on.

Generates several datasets per input kind, puts each on a scratch DFS like a user would
(`datasets put` of PNG folders, CSV, JSON lines), and runs one real training job per dataset and
framework (``run_job`` in this process, no broker) with a spec that names only the family. Prints
one JSON line per run and a markdown table (dataset x family x framework: validation accuracy
of the default, epochs run / best, the grid's and the study's best, seconds).

    PYTHONPATH=. nice -n 19 .venv/bin/python bench/bench_model_quality.py \
        [--datasets tickets,tables,moons,intents,letters32,shapes48,digits32,digits64] \
        [--frameworks tensorflow,mxnet,torch] [--grid] [--tune 16 [--parallel 2] [--pruner median]]

Dataset seeds: ``--seed`` (default 2000, the reported table); 1000 was the development run on
which the defaults' patience was chosen (the tests use 0-100). The digits are scikit-learn's
(the split's seed is the spec's default). ``tickets`` (bench/quality_tickets.py) is the hard
text set; its difficulty is that module's logistic-regression baseline.

``--baselines``: instead, each family against its simple baseline on sets made for that and
never used to choose a default (bench/quality_heldout.py: ``reviews``, ``helpdesk`` for text
against bag-of-words and bigram logistic regression, ``friedman`` for the regressor against
ridge), each scored on a test
split no job saw (bench/quality_baselines.py); ``--datasets`` picks among those, and the
development sets (``tickets``, ``intents``, ``diabetes``) the defaults were chosen on can be
named too. One table: dataset x framework x default x baselines x seconds; with ``--seeds N``
each set runs N seeds and a second table gives each dataset and framework's mean and spread.

``--tune N``: also a ``headrace tune`` study of N trials per dataset and framework, every trial
an ordinary job through an embedded broker, ``headrace control`` and its local executor
(``--parallel`` at a time), searching the grid's two hyperparameters over wider ranges
(``TUNE_SPACE``). The grid and the study are judged alike: validation accuracy (the study's
``--metric accuracy``; the grid's best by accuracy, ties to the lower loss). ``--out FILE``
appends each run's JSON line to FILE; ``--table FILE`` prints the table of saved lines.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

sys.path.insert(0, str(Path(__file__).resolve().parent))

import quality_baselines
import quality_blind
import quality_blind2
import quality_fresh
import quality_heldout
import quality_tickets
from _control import control_plane

from headrace.contracts import ModelSpec
from headrace.store import versions
from headrace.streams.clients import KafkaConnection
from headrace.streams.topics import ControlTopics
from headrace.trainers import history, jobs
from headrace.trainers.dataset_files import put_dataset

SEED = 2000  # --seed


def noisy_table(out: Path) -> Path:
    """4 classes, 20 features (8 informative, 4 redundant), 2% flipped labels, columns on
    scales from 0.01 to 1000 with offsets: a table that needs standardisation."""
    from sklearn.datasets import make_classification

    x, y = make_classification(n_samples=2500, n_features=20, n_informative=8, n_redundant=4,
                               n_classes=4, n_clusters_per_class=2, class_sep=2.0, flip_y=0.02,
                               random_state=SEED)
    rng = np.random.default_rng(SEED)
    x = x * 10 ** rng.uniform(-2, 3, x.shape[1]) + rng.uniform(-500, 500, x.shape[1])
    return _csv(out / "table.csv", x, y)


def moons_table(out: Path) -> Path:
    """Two interleaved half-moons (noise 0.2) hidden among 8 pure-noise columns."""
    from sklearn.datasets import make_moons

    x, y = make_moons(n_samples=2000, noise=0.2, random_state=SEED + 1)
    rng = np.random.default_rng(SEED + 1)
    x = np.hstack([x, rng.normal(size=(len(x), 8))])
    return _csv(out / "moons.csv", x, y)


def _csv(path: Path, x: np.ndarray, y: np.ndarray) -> Path:
    cols = {f"x{i}": pa.array(x[:, i]) for i in range(x.shape[1])}
    cols["label"] = pa.array(y.astype(np.int64))
    pcsv.write_csv(pa.table(cols), path)
    return path


# An intent corpus of its own (not the tests' chat-bot one): banking and smart home.
INTENTS = {
    "balance": ["what is my {acct} balance", "how much money is in my {acct}",
                "show the {acct} balance {when}", "balance of {acct} please",
                "do i have enough in {acct} for {thing}"],
    "transfer": ["send {amount} to {who}", "transfer {amount} from {acct} to {who}",
                 "pay {who} {amount} {when}", "move {amount} into {acct}",
                 "wire {amount} to {who} {when}"],
    "lights": ["turn on the {room} lights", "switch off the lamp in the {room}",
               "dim the {room} lights {when}", "lights in the {room} to half",
               "make the {room} brighter"],
    "thermostat": ["set the {room} to {temp} degrees", "it is too cold in the {room}",
                   "raise the heating {when}", "cool the {room} down to {temp}",
                   "what temperature is the {room}"],
    "order_food": ["order a {food} for {when}", "i want {food} delivered",
                   "get me some {food} from the usual place", "can you order {food} {when}",
                   "deliver a {food} to the {room}"],
    "track": ["where is my package", "track the {thing} i ordered",
              "when does my {thing} arrive", "has the {thing} shipped yet",
              "delivery status of my {thing} {when}"],
    "cancel": ["cancel my {food} order", "stop the {thing} delivery",
               "i do not want the {thing} anymore", "cancel the transfer to {who}",
               "undo my last order {when}"],
    "help": ["what can you do", "i need help with {acct}", "how do i use this {when}",
             "talk to a human", "show me the options"],
}
FILL = {"acct": ["checking", "savings", "credit card", "joint account", "travel fund"],
        "when": ["today", "tonight", "tomorrow", "right now", "this friday", ""],
        "amount": ["20 dollars", "a hundred euros", "50", "1500 pounds", "ten bucks"],
        "who": ["mom", "alex", "the landlord", "sam", "my brother"],
        "room": ["kitchen", "bedroom", "living room", "office", "hallway"],
        "temp": ["19", "twenty one", "22", "18", "25"],
        "food": ["pizza", "sushi", "burger", "pad thai", "salad"],
        "thing": ["shoes", "laptop", "book", "headphones", "package"]}


def intents(out: Path, rows: int = 800) -> Path:
    rng = np.random.default_rng(SEED + 2)
    names = sorted(INTENTS)
    lines = []
    for _ in range(rows):
        intent = names[int(rng.integers(len(names)))]
        text = INTENTS[intent][int(rng.integers(len(INTENTS[intent])))].format(
            **{k: v[int(rng.integers(len(v)))] for k, v in FILL.items()})
        words = text.split()
        if rng.random() < 0.3:  # chatty users
            words.insert(0, str(rng.choice(["hey", "please", "ok so", "um", "quick one"])))
        if rng.random() < 0.2:
            words.append(str(rng.choice(["thanks", "asap", "!", "?", "please"])))
        lines.append(json.dumps({"utterance": " ".join(words).capitalize(), "label": intent}))
    path = out / "intents.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def digits(out: Path, size: int) -> Path:
    """scikit-learn's 1,797 8x8 digits upscaled (bilinear) to size x size grey PNGs."""
    from sklearn.datasets import load_digits

    d = load_digits()
    folder = out / f"digits{size}"
    for i, (img, y) in enumerate(zip(d.images, d.target, strict=True)):
        (folder / str(y)).mkdir(parents=True, exist_ok=True)
        pixels = np.clip(img * (255 / 16), 0, 255).astype(np.uint8)
        Image.fromarray(pixels, mode="L").resize((size, size), Image.BILINEAR).save(
            folder / str(y) / f"{i:04d}.png")
    return folder


def shapes(out: Path, per_class: int = 250, size: int = 48) -> Path:
    """Circles, squares and triangles: random size, place, grey levels and pixel noise (RGB)."""
    rng = np.random.default_rng(SEED + 3)
    folder = out / "shapes48"
    for cls in ("circle", "square", "triangle"):
        (folder / cls).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            bg = tuple(int(v) for v in rng.integers(0, 120, 3))
            fg = tuple(int(v) for v in rng.integers(130, 256, 3))
            img = Image.new("RGB", (size, size), bg)
            draw = ImageDraw.Draw(img)
            r = int(rng.integers(7, 16))
            cx, cy = (int(v) for v in rng.integers(r + 1, size - r - 1, 2))
            if cls == "circle":
                draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fg)
            elif cls == "square":
                draw.rectangle((cx - r, cy - r, cx + r, cy + r), fill=fg)
            else:
                draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=fg)
            noisy = np.asarray(img, np.float32) + rng.normal(0, 20, (size, size, 3))
            Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(
                folder / cls / f"{i:04d}.png")
    return folder


def letters(out: Path, per_class: int = 120, size: int = 32) -> Path:
    """Ten capital letters (A-J) in the default TrueType font: random size (14-24 px),
    position, rotation (+-20 degrees), grey levels and pixel noise; grey PNGs."""
    from PIL import ImageFont

    rng = np.random.default_rng(SEED + 4)
    folder = out / "letters32"
    for letter in "ABCDEFGHIJ":
        (folder / letter).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            font = ImageFont.load_default(size=int(rng.integers(14, 25)))
            img = Image.new("L", (size, size), int(rng.integers(0, 90)))
            glyph = Image.new("L", (size, size), 0)
            ImageDraw.Draw(glyph).text((size / 2, size / 2), letter, fill=255, font=font,
                                       anchor="mm")
            glyph = glyph.rotate(float(rng.uniform(-20, 20)), resample=Image.BILINEAR,
                                 translate=(int(rng.integers(-5, 6)), int(rng.integers(-5, 6))))
            img.paste(int(rng.integers(150, 256)), mask=glyph)
            noisy = np.asarray(img, np.float32) + rng.normal(0, 15, (size, size))
            Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(
                folder / letter / f"{i:04d}.png")
    return folder


DATASETS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "tables": (noisy_table, "mlp"),
    "moons": (moons_table, "mlp"),
    "intents": (intents, "text"),
    # Hard text: shared vocabulary, distractor clauses, typos (bench/quality_tickets.py).
    "tickets": (lambda out: quality_tickets.write(out / "tickets.jsonl", SEED + 5), "text"),
    "shapes48": (shapes, "cnn"),
    "digits32": (lambda out: digits(out, 32), "cnn"),
    "digits64": (lambda out: digits(out, 64), "cnn"),
    "letters32": (letters, "cnn"),
}


# --grid: a small grid of hand-set values (the "tuned" column), best of the four.
GRID = [{"learning_rate": lr, "batch_size": bs} for lr in (3e-3, 3e-4) for bs in (32, 128)]
# --tune: the grid's two hyperparameters, wider (what a user would search first).
TUNE_SPACE = "learning_rate=log:1e-4:1e-2 batch_size=16,32,64,128"


def run_one(root: Path, uri: str, family: str, framework: str,
            params: dict[str, float] | None = None) -> dict[str, object]:
    spec = ModelSpec.model_validate({"model": family, **(params or {})})
    req, st, seconds, failed = quality_baselines.train_here(
        root, uri=uri, spec=spec, framework=framework, model_name=f"q-{framework}")
    if st is None or st.version is None:
        return failed
    jid = st.job_id
    mv = versions.load_version(root, req.model_name, st.version)
    h = history.read(root, jid)
    log = (root / "jobs" / jid / "log.txt")
    return {"accuracy": round(mv.manifest.metrics["accuracy"], 4),
            "loss": round(mv.manifest.metrics["loss"], 4),
            "epochs_run": len(h.epochs), "best_epoch": h.best_epoch,
            "stopped_because": h.stopped_because, "result": st.result,
            "gate": "; ".join(st.gate_reasons), "seconds": round(seconds, 1),
            "log": str(log) if log.exists() else ""}


def run_grid(root: Path, uri: str, family: str, framework: str) -> dict[str, object]:
    tried = [{**p, **run_one(root, uri, family, framework, p)} for p in GRID]
    ok = [t for t in tried if "accuracy" in t]
    best = max(ok, key=lambda t: (float(t["accuracy"]), -float(t["loss"])))  # type: ignore[arg-type]
    return {"grid_best": {k: best[k] for k in ("learning_rate", "batch_size", "accuracy",
                                                "loss", "seconds")},
            "grid_seconds": round(sum(float(t["seconds"]) for t in tried), 1)}  # type: ignore[arg-type]


def run_tune(root: Path, control: tuple[KafkaConnection, ControlTopics], uri: str, name: str,
             family: str, framework: str, trials: int, parallel: int,
             pruner: str = "median") -> dict[str, object]:
    """A study of ``trials`` trials through the control plane; its best trial by accuracy."""
    from headrace.trainers.tuning import StudyConfig, run_study

    conn, topics = control
    study = f"{name}-{framework}-{pruner}"
    config = StudyConfig(name=study, model_name=f"t-{study}", framework=framework,
                         dataset_uri=uri, model=family,
                         epochs=ModelSpec.model_fields["epochs"].default, space=TUNE_SPACE,
                         metric="accuracy", pruner=pruner)
    t0 = time.perf_counter()
    result = run_study(root=root, conn=conn, config=config, trials=trials, parallel=parallel,
                       topics=topics, poll_s=0.5, promote_best=False)
    seconds = round(time.perf_counter() - t0, 1)
    states = [t.state for t in result.trials]
    out: dict[str, object] = {"tune_pruner": pruner, "tune_trials": len(states),
                              "tune_pruned": states.count("pruned"),
                              "tune_failed": states.count("fail"), "tune_seconds": seconds}
    b = result.best
    if b is not None and b.value is not None:
        st = jobs.read_status(root, b.job_id)
        out["tune_best"] = {**b.params, "accuracy": round(b.value, 4), "trial": b.number,
                            "loss": round(st.metrics.get("loss", float("nan")), 4)
                            if st else None, "epochs": b.epochs}
    return out


def print_table(rows: list[dict[str, object]]) -> None:
    """Validation accuracy: the default, the grid's best, the study's best; wall seconds."""
    print("\n| dataset | rows | family | framework | default | epochs run / best | grid best "
          "(lr, batch) | tuned (lr, batch) | default s | grid s | tune s (pruned) |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['dataset']} | {r['rows']} | {r['family']} | {r['framework']} | "
                  f"failed: {r['error']} | | | | {r['seconds']} | | |")
            continue
        g, t = r.get("grid_best"), r.get("tune_best")
        grid = (f"{g['accuracy']:.3f} ({g['learning_rate']:g}, {g['batch_size']})"
                if isinstance(g, dict) else "")
        tuned = (f"{t['accuracy']:.3f} ({t['learning_rate']:.2g}, {t['batch_size']})"
                 if isinstance(t, dict) else ("no trial completed" if "tune_trials" in r
                                              else ""))
        pruner = r.get("tune_pruner", "median")
        how = "" if pruner == "median" else f", pruner {pruner}"
        tune_s = (f"{r['tune_seconds']} ({r['tune_pruned']} of {r['tune_trials']} pruned{how})"
                  if "tune_trials" in r else "")
        print(f"| {r['dataset']} | {r['rows']} | {r['family']} | {r['framework']} | "
              f"{r['accuracy']:.3f} | {r['epochs_run']} / {r['best_epoch']} | {grid} | "
              f"{tuned} | {r['seconds']} | {r.get('grid_seconds', '')} | {tune_s} |")


def diabetes(out: Path) -> Path:
    from sklearn.datasets import load_diabetes

    d = load_diabetes()
    return _csv_values(out / "diabetes.csv", d.data, d.target)


def _csv_values(path: Path, x: np.ndarray, y: np.ndarray) -> Path:
    cols = {f"x{i}": pa.array(x[:, i]) for i in range(x.shape[1])}
    cols["label"] = pa.array(y.astype(np.float64))
    pcsv.write_csv(pa.table(cols), path)
    return path


# --baselines: name -> (make(out, seed), family or "regressor", text field or None for
# columns, the seeds --seeds 3 takes: held-out generators at 3000+, development ones below)
BASELINE_SETS: dict[str, tuple[Callable[[Path, int], Path], str, str | None, int]] = {
    "reviews": (lambda out, s: quality_heldout.reviews(out / f"reviews{s}.jsonl", seed=s),
                "text", "review", quality_heldout.SEED),
    "helpdesk": (lambda out, s: quality_heldout.helpdesk(out / f"helpdesk{s}.jsonl", seed=s),
                 "text", "ticket", quality_heldout.SEED),
    "friedman": (lambda out, s: quality_heldout.friedman(out / f"friedman{s}.csv", seed=s),
                 "regressor", None, quality_heldout.SEED),
    "linear": (lambda out, s: quality_heldout.linear(out / f"linear{s}.csv", seed=s),
               "regressor", None, quality_heldout.SEED),
    # written later, blind to the models (bench/quality_fresh.py)
    "support": (lambda out, s: quality_fresh.support(out / f"support{s}.jsonl", seed=s),
                "text", "ticket", quality_fresh.SEED),
    "housing": (lambda out, s: quality_fresh.housing(out / f"housing{s}.csv", seed=s),
                "regressor", None, quality_fresh.SEED),
    # written later still, blind to the models, for the lead ids and the n-gram alternative
    # (bench/quality_blind.py); `support` above had become a development set for those
    "triage": (lambda out, s: quality_blind.triage(out / f"triage{s}.jsonl", seed=s),
               "text", "text", quality_blind.SEED),
    "claims": (lambda out, s: quality_blind.claims(out / f"claims{s}.jsonl", seed=s),
               "text", "text", quality_blind.SEED),
    # one more, written blind after the torch text layers' start changed (bench/quality_blind2.py)
    "hr": (lambda out, s: quality_blind2.hr(out / f"hr{s}.jsonl", seed=s), "text", "text",
           quality_blind2.SEED),
    # development sets: the defaults were chosen on these
    "tickets": (lambda out, s: quality_tickets.write(out / f"tickets{s}.jsonl", s), "text",
                "ticket", 1005),
    "intents": (lambda out, s: intents(out), "text", "utterance", 0),
    "diabetes": (lambda out, s: diabetes(out), "regressor", None, 0),
}
HELD_OUT = ("reviews", "helpdesk", "friedman", "linear", "support", "housing", "triage",
            "claims", "hr")


def print_baselines(rows: list[dict[str, object]]) -> None:
    print("\n| dataset | train / test rows | framework | default (test) | baseline (test) | "
          "default s | baseline s |\n|---|---|---|---|---|---|---|")
    for r in rows:
        if "bigram_lr" in r:
            base = f"bigram LR {r['bigram_lr']:.3f}, bag-of-words LR {r['bow_lr']:.3f}"
            base_s = f"{r['bigram_lr_seconds']}, {r['bow_lr_seconds']}"
        else:
            base, base_s = f"ridge {r['ridge']:.3f}", str(r["ridge_seconds"])
        metric = "accuracy" if "bigram_lr" in r else "R²"
        got = f"failed: {r['error']}" if "error" in r else f"{metric} {r['default']:.3f}"
        print(f"| {r['dataset']} {r.get('seed', '')} ({r['family']}) | "
              f"{r['train_rows']} / {r['test_rows']} | "
              f"{r['framework']} | {got} | {base} | {r['seconds']} | {base_s} |")


def summarise_baselines(rows: list[dict[str, object]]) -> None:
    """Per dataset and framework over its seeds: mean (min..max) of the default and of the
    baseline it must beat (bigram LR, ridge), how many seeds it won, mean seconds."""
    groups: dict[tuple[str, str], list[dict[str, object]]] = {}
    for r in rows:
        if "error" not in r:
            groups.setdefault((str(r["dataset"]), str(r["framework"])), []).append(r)
    print("\n| dataset | framework | seeds | default: mean (min..max) | baseline: mean "
          "(min..max) | default - baseline: mean (min..max) | default s (mean) | "
          "baseline s (mean) |\n|---|---|---|---|---|---|---|---|")
    for (name, fw), rs in groups.items():
        key = "bigram_lr" if "bigram_lr" in rs[0] else "ridge"
        d = np.array([float(r["default"]) for r in rs])  # type: ignore[arg-type]
        b = np.array([float(r[key]) for r in rs])  # type: ignore[arg-type]
        s = np.mean([float(r["seconds"]) for r in rs])  # type: ignore[arg-type]
        bs = np.mean([float(r[f"{key}_seconds"]) for r in rs])  # type: ignore[arg-type]
        seeds = ",".join(str(r.get("seed", "")) for r in rs)
        print(f"| {name} | {fw} | {seeds} | {d.mean():.3f} ({d.min():.3f}..{d.max():.3f}) | "
              f"{'bigram LR' if key == 'bigram_lr' else 'ridge'} {b.mean():.3f} "
              f"({b.min():.3f}..{b.max():.3f}) | {(d - b).mean():+.3f} "
              f"({(d - b).min():+.3f}..{(d - b).max():+.3f}) | {s:.0f} | {bs:.1f} |")


def main() -> None:
    global SEED
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--frameworks", default="tensorflow,mxnet,torch")
    ap.add_argument("--root", type=Path, default=None, help="scratch DFS (default: a temp dir)")
    ap.add_argument("--seed", type=int, default=SEED, help="dataset seed (1000: development)")
    ap.add_argument("--grid", action="store_true",
                    help="also run the 2x2 grid of learning rate x batch size; report its best")
    ap.add_argument("--tune", type=int, default=0, metavar="N",
                    help="also run a headrace tune study of N trials (through a control plane)")
    ap.add_argument("--parallel", type=int, default=2, help="the study's trials at once")
    ap.add_argument("--pruner", default="median", help="the study's pruner (median, none...)")
    ap.add_argument("--out", type=Path, default=None, help="append each JSON line to this file")
    ap.add_argument("--baselines", action="store_true",
                    help="each family against its simple baseline on held-out sets")
    ap.add_argument("--seeds", type=int, default=1,
                    help="--baselines: this many seeds a set (generator seed, and for a fixed "
                         "set such as diabetes the test split's)")
    ap.add_argument("--table", type=Path, default=None,
                    help="print the table of the JSON lines in this file, run nothing")
    args = ap.parse_args()
    if args.table:
        saved = [json.loads(line) for line in args.table.read_text().splitlines() if line]
        (print_baselines if args.baselines else print_table)(saved)
        if args.baselines:
            summarise_baselines(saved)
        return
    if args.baselines:
        names = (HELD_OUT if args.datasets == ",".join(DATASETS)
                 else tuple(args.datasets.split(",")))
        root = args.root or Path(tempfile.mkdtemp(prefix="quality-"))
        out: list[dict[str, object]] = []
        for name in names:
            make, family, field, first = BASELINE_SETS[name]
            for seed in range(first, first + args.seeds):
                for row in quality_baselines.run(
                        root, f"{name}{seed}", lambda out, s=seed, m=make: m(out, s),  # type: ignore[misc]
                        family=family, frameworks=args.frameworks.split(","),
                        text_field=field, split_seed=seed - first):
                    out.append({**row, "dataset": name, "seed": seed})
                    if args.out:
                        with args.out.open("a") as f:
                            f.write(json.dumps(out[-1]) + "\n")
        print_baselines(out)
        summarise_baselines(out)
        return
    SEED = args.seed
    root = args.root or Path(tempfile.mkdtemp(prefix="quality-"))
    root.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        control = stack.enter_context(control_plane(root, args.parallel)) if args.tune else None
        rows = [run_dataset(root, name, fw, args, control)
                for name in args.datasets.split(",") for fw in args.frameworks.split(",")]
    print_table(rows)


_PUT: dict[str, tuple[int, str]] = {}  # dataset name -> (rows, uri): put once per run


def run_dataset(root: Path, name: str, framework: str, args: argparse.Namespace,
                control: tuple[KafkaConnection, ControlTopics] | None) -> dict[str, object]:
    make, family = DATASETS[name]
    if name not in _PUT:
        src = root / "sources"
        src.mkdir(exist_ok=True)
        info = put_dataset(root=root, path=make(src), name=name)
        _PUT[name] = (info.rows, info.uri)
    n_rows, uri = _PUT[name]
    out = {"dataset": name, "rows": n_rows, "family": family, "framework": framework,
           "seed": SEED, **run_one(root, uri, family, framework)}
    if args.grid:
        out.update(run_grid(root, uri, family, framework))
    if control is not None:
        out.update(run_tune(root, control, uri, name, family, framework, args.tune,
                            args.parallel, args.pruner))
    line = json.dumps(out)
    print(line, flush=True)
    if args.out:
        with args.out.open("a") as f:
            f.write(line + "\n")
    return out


if __name__ == "__main__":
    main()
