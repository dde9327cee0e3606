"""A text classifier's alternative is the n-gram logistic regression of its training split
(trainers.ngram_start): the solver agrees with scikit-learn's, every framework's text model
built as it predicts exactly that regression, and a job whose trained network does not beat it
publishes it (trainers.start_check on log loss)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from headrace.codecs import text as text_codec
from headrace.contracts import ModelSpec
from headrace.models import load
from headrace.store.dfs import job_dir
from headrace.trainers import start_check
from headrace.trainers.backends import get_backend
from headrace.trainers.dataset_files import put_dataset
from headrace.trainers.datasets import Split, load_dataset, split
from headrace.trainers.inputs import ModelPlan, plan_for
from headrace.trainers.ngram_start import features, fit, ngram_start
from headrace.trainers.start_check import START, compare
from tests.trainers.test_families import one_thread, train
from tests.trainers.test_start_check import force_start

TOPICS = {"billing": ["invoice", "charge", "refund", "payment"],
          "shipping": ["parcel", "courier", "delivery", "tracking"],
          "login": ["password", "account", "locked", "reset"]}
FILLER = ["hello", "please help", "thanks", "my", "the", "is", "again", "today", "not", "ok"]


def _texts(n: int, seed: int) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(seed)
    names = sorted(TOPICS)
    texts, labels = [], []
    for _ in range(n):
        label = str(rng.choice(names))
        other = str(rng.choice(names))
        words = [str(rng.choice(FILLER)) for _ in range(int(rng.integers(3, 9)))]
        words += [str(rng.choice(TOPICS[label])) for _ in range(int(rng.integers(1, 3)))]
        if rng.random() < 0.4:  # a word of another topic in passing
            words.append(str(rng.choice(TOPICS[other])))
        rng.shuffle(words)
        texts.append(" ".join(words))
        labels.append(label if rng.random() > 0.05 else other)
    return texts, labels


def _put(dfs: Path, tmp_path: Path, n: int = 360, seed: int = 0) -> str:
    texts, labels = _texts(n, seed)
    path = tmp_path / "tickets.jsonl"
    path.write_text("".join(json.dumps({"ticket": t, "label": y}) + "\n"
                            for t, y in zip(texts, labels, strict=True)))
    return put_dataset(root=dfs, path=path).uri


def test_the_solver_finds_scikit_learns_logistic_regression() -> None:
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(3)
    ids = rng.integers(0, 40, size=(200, 12))
    y = (ids[:, 0] % 3 + (ids[:, 1] > 30)) % 3
    x = features(ids, 40)
    for c in (0.1, 10.0):
        params = fit(x, y, 3, c)
        w, b = params[:-3].reshape(40, 3), params[-3:]
        ours = x @ w + b
        ref = LogisticRegression(C=c, tol=1e-10, max_iter=10_000).fit(x, y)
        theirs = ref.decision_function(x)
        # Multinomial logits are defined up to a constant a row: compare centred.
        np.testing.assert_allclose(ours - ours.mean(1, keepdims=True),
                                   theirs - theirs.mean(1, keepdims=True), atol=2e-3)


def _plan(dfs: Path, uri: str) -> tuple[ModelPlan, Split]:
    spec = ModelSpec(model="text")
    sp = split(load_dataset(root=dfs, uri=uri, spec=spec), validation_split=spec.validation_split,
               seed=spec.seed)
    plan = plan_for(spec=spec, x_train=sp.x_train, y_train=sp.y_train,
                    classes=("billing", "login", "shipping"), root=dfs)
    return plan, sp


@pytest.mark.parametrize("framework", ["tensorflow", "mxnet", "torch"])
def test_each_framework_starts_as_the_regression(dfs: Path, tmp_path: Path,
                                                 framework: str) -> None:
    one_thread(framework)
    plan, sp = _plan(dfs, _put(dfs, tmp_path))
    start = plan.alternative
    assert start is not None and start.kind == "n-gram logistic regression"
    assert plan.linear_start is None  # the network trains from its own initial weights
    (inp,) = plan.inputs
    vocab = plan.stats[inp.name].vocabulary
    assert start.weights.shape == (text_codec.id_count(inp, len(vocab)), 3)
    values = np.asarray(sp.x_val.columns[inp.name], object)
    logits = features(text_codec.token_ids(inp, values, vocab), start.weights.shape[0]
                      ) @ start.weights + start.bias
    want = np.exp(logits - logits.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    model = get_backend(framework).create(spec=ModelSpec(model="text"), n_features=0,
                                          n_outputs=3, seed=1,
                                          plan=dataclasses.replace(plan, linear_start=start))
    got = model.predict(sp.x_val)
    np.testing.assert_allclose(got, want, atol=2e-5)
    # The regression alone already separates the topics on rows it did not see.
    assert (got.argmax(1) == sp.y_val).mean() > 0.8


def test_no_start_for_other_families_or_too_few_rows(dfs: Path, tmp_path: Path) -> None:
    plan, sp = _plan(dfs, _put(dfs, tmp_path, n=12))
    assert plan.alternative is None
    plan, sp = _plan(dfs, _put(dfs, tmp_path))
    x = sp.x_train
    assert ngram_start("mlp", x.signature, plan.stats, x.columns, sp.y_train, 3) is None


def test_the_start_check_compares_log_loss() -> None:
    y = np.array([0, 1, 2, 0] * 50)
    sure = np.eye(3)[y] * 0.9 + 0.1 / 3
    vague = np.full((len(y), 3), 1 / 3)
    assert compare(y, vague, sure, classifier=True).kept == start_check.TRAINED
    check = compare(y, sure, vague, classifier=True)
    assert check.kept == START and check.record()["val_log_loss_gain"] < 0


@pytest.mark.parametrize("framework", ["tensorflow", "mxnet", "torch"])
def test_a_start_not_beaten_is_published_and_predicts_the_regression(
        dfs: Path, tmp_path: Path, framework: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision forced (the rule is tested above): the start's weights, saved before the
    first epoch, load back over the trained ones and are what the job publishes."""
    force_start(monkeypatch)
    uri = _put(dfs, tmp_path)
    mv = train(dfs, uri, framework, model="text")
    training = mv.manifest.extra["training"]
    assert training == json.loads(
        (job_dir(dfs, mv.manifest.job_id or "") / "history.json").read_text())
    assert training["start_check"]["kept"] == START and "val_log_loss_gain" in training[
        "start_check"]
    assert mv.manifest.format_version == 3  # lead ids: a format-2 scorer refuses it
    plan, sp = _plan(dfs, uri)
    start = plan.alternative
    assert start is not None
    (inp,) = plan.inputs
    values = np.asarray(sp.x_val.columns[inp.name], object)
    logits = features(text_codec.token_ids(inp, values, plan.stats[inp.name].vocabulary),
                      start.weights.shape[0]) @ start.weights + start.bias
    rows = [{"ticket": str(v)} for v in values]
    got = np.array([p["scores"] for p in load(f"m:{mv.version}", dfs_root=dfs).predict(rows)])
    assert (got.argmax(1) == logits.argmax(1)).all()
