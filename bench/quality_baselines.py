"""Families against their simple baselines (bench_model_quality ``--baselines``).

Each set is split once, stratified for a classifier, 80 / 20 (``random_state=0``): Headrace
trains on the 80 % (``datasets put`` of the file, a real job with a spec naming only the family,
which splits off its own validation rows) and scores the 20 % through ``headrace predict``'s
path (the scorer's decode and codec, ``scorers.offline``); the baselines fit the same 80 % and
are scored on the same 20 %: scikit-learn's logistic regression (C by 3-fold CV) on a bag of
words and on uni+bigrams, ridge (alpha by CV) on standardised columns. Classifiers: test
accuracy; regressors: test R².
"""

from __future__ import annotations

import json
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from headrace.contracts import ModelSpec, TrainRequested
from headrace.store import versions
from headrace.trainers import jobs
from headrace.trainers.dataset_files import put_dataset
from headrace.trainers.job_process import run_job

Rows = list[dict[str, Any]]


def read_rows(path: Path) -> Rows:
    if path.suffix == ".csv":
        import pyarrow.csv as pcsv

        return pcsv.read_csv(path).to_pylist()
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def split(rows: Rows, classifier: bool, seed: int = 0) -> tuple[Rows, Rows]:
    from sklearn.model_selection import train_test_split

    y = [r["label"] for r in rows] if classifier else None
    train, test = train_test_split(rows, test_size=0.2, stratify=y, random_state=seed)
    return list(train), list(test)


def write_rows(path: Path, rows: Rows) -> Path:
    if path.suffix == ".csv":
        import pyarrow as pa
        import pyarrow.csv as pcsv

        pcsv.write_csv(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def train_here(root: Path, *, uri: str, spec: ModelSpec, framework: str, model_name: str
               ) -> tuple[TrainRequested, jobs.JobStatus | None, float, dict[str, Any]]:
    """One training job run in this process (no broker): its request, final status (None or
    without a version when it failed), seconds, and the failure as a result row."""
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name=model_name,
                         framework=framework, dataset_uri=uri, spec=spec)
    jid, _ = jobs.create_request(root, req)
    t0 = time.perf_counter()
    code = run_job(root=root, job_id=jid, conn=None)
    seconds = time.perf_counter() - t0
    st = jobs.read_status(root, jid)
    failed = ({} if code == 0 and st is not None and st.version is not None else
              {"error": st.reason if st else f"exit {code}", "seconds": round(seconds, 1)})
    return req, (st if not failed else None), seconds, failed


def headrace_score(root: Path, train_path: Path, test: Rows, *, name: str, family: str,
                   framework: str, classifier: bool) -> dict[str, Any]:
    """Train with no hyperparameters (the task aside), score the test rows offline."""
    from headrace.scorers import offline

    uri = put_dataset(root=root, path=train_path, name=f"{name}-train").uri
    spec = ModelSpec.model_validate({"model": family,
                                     **({} if classifier else {"task": "regressor"})})
    req, st, seconds, failed = train_here(root, uri=uri, spec=spec, framework=framework,
                                          model_name=f"b-{name}-{framework}")
    if st is None or st.version is None:
        return failed
    model = offline.load(root, f"{req.model_name}:{st.version}")
    feats = [{k: v for k, v in r.items() if k != "label"} for r in test]
    outs = model.predict(feats)
    mv = versions.load_version(root, req.model_name, st.version)
    key = mv.manifest.output_signature()[0].name
    y = [r["label"] for r in test]
    if classifier:
        got = [_field(o, key, "label") for o in outs]
        score = float(np.mean([a == b for a, b in zip(got, y, strict=True)]))
    else:
        pred = np.array([_value(o, key) for o in outs], np.float64)
        score = _r2(np.asarray(y, np.float64), pred)
    return {"default": round(score, 4), "seconds": round(seconds, 1),
            "val_" + ("accuracy" if classifier else "loss"):
                round(mv.manifest.metrics.get("accuracy" if classifier else "loss", 0.0), 4)}


def _field(o: Any, key: str, field: str) -> Any:
    """A prediction's field: at the top for a one-output model, else under the output."""
    if not isinstance(o, dict):
        return None
    return o[field] if field in o else (o.get(key) or {}).get(field)


def _value(o: Any, key: str) -> float:
    v = _field(o, key, "scores")  # a regressor's prediction: its value(s) under scores
    while isinstance(v, list):
        v = v[0]
    return float(v) if v is not None else float("nan")


def _r2(y: np.ndarray, p: np.ndarray) -> float:
    return float(1 - np.sum((y - p) ** 2) / np.sum((y - y.mean()) ** 2))


def text_baselines(field: str, train: Rows, test: Rows) -> dict[str, float]:
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.pipeline import make_pipeline

    xt, yt = [r[field] for r in train], [r["label"] for r in train]
    xv, yv = [r[field] for r in test], [r["label"] for r in test]
    out = {}
    for name, ngrams in (("bow_lr", (1, 1)), ("bigram_lr", (1, 2))):
        model = make_pipeline(CountVectorizer(ngram_range=ngrams),
                              LogisticRegressionCV(Cs=[0.1, 1.0, 10.0], cv=3, max_iter=3000))
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[name] = round(float(model.fit(xt, yt).score(xv, yv)), 4)
        out[name + "_seconds"] = round(time.perf_counter() - t0, 1)
    return out


def ridge_baseline(train: Rows, test: Rows) -> dict[str, float]:
    from sklearn.linear_model import RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    cols = [k for k in train[0] if k != "label"]
    xt = np.array([[r[c] for c in cols] for r in train], np.float64)
    xv = np.array([[r[c] for c in cols] for r in test], np.float64)
    yt = np.array([r["label"] for r in train], np.float64)
    yv = np.array([r["label"] for r in test], np.float64)
    t0 = time.perf_counter()
    model = make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-3, 3, 13))).fit(xt, yt)
    return {"ridge": round(_r2(yv, model.predict(xv)), 4),
            "ridge_seconds": round(time.perf_counter() - t0, 1)}


def run(root: Path, name: str, make: Callable[[Path], Path], *, family: str,
        frameworks: list[str], text_field: str | None = None,
        split_seed: int = 0) -> list[dict[str, Any]]:
    """One set: its split, the baselines, then each framework's default."""
    classifier = family != "regressor"
    src = root / "sources"
    src.mkdir(parents=True, exist_ok=True)
    path = make(src)
    train, test = split(read_rows(path), classifier, split_seed)
    train_path = write_rows(src / f"{name}-train{path.suffix}", train)
    base = (text_baselines(text_field, train, test) if text_field else
            ridge_baseline(train, test))
    out = []
    for fw in frameworks:
        got = headrace_score(root, train_path, test, name=name,
                             family="mlp" if family == "regressor" else family,
                             framework=fw, classifier=classifier)
        row = {"dataset": name, "train_rows": len(train), "test_rows": len(test),
               "family": family, "framework": fw, **got, **base}
        print(json.dumps(row), flush=True)
        out.append(row)
    return out
