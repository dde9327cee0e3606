"""``--precision bf16`` for torch models, on the CPU: the program runs under autocast (scores
move off fp32's, labels stay), a sample of live calls is checked against fp32 and the share of
equal labels is on ``/metrics``; fp16 on a CPU and bf16 for a non-torch model are refused in one
line. The precision is chosen once per process (``precision._chosen``): each phase resets it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.core.errors import ConfigError, PermanentError
from headrace.core.settings import Settings
from headrace.scorers import adapters, offline
from headrace.scorers.adapters import precision
from headrace.streams.clients import KafkaConnection
from headrace.streams.topics import predictions_topic
from tests.fixtures import http_get, read_topic, ready_scorer
from tests.scorers import signature_models as sm
from tests.scorers import torch_models as tm
from tests.scorers.test_scoring_signatures import produce


def _images(n: int) -> list[dict[str, Any]]:
    return [{"image": sm.encode(img)} for img in sm.digits(n)]


def _choose(monkeypatch: pytest.MonkeyPatch, chosen: str) -> None:
    monkeypatch.setattr(precision, "_chosen", [])
    monkeypatch.setattr(adapters, "_chosen", [])
    precision.select(chosen)


def _scores(outs: list[Any]) -> np.ndarray:
    return np.asarray([o["scores"] for o in outs])


def test_bf16_moves_the_scores_keeps_the_labels_and_counts_its_agreement(
        dfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mv = tm.pt_digits(dfs, "digits")
    ref = f"digits:{mv.version}"
    records = _images(96)
    _choose(monkeypatch, "fp32")
    exact = _scores(offline.load(dfs, ref).predict(records))
    assert precision.AGREEMENT.rows(ref) == 0  # fp32: nothing to compare

    _choose(monkeypatch, "bf16")
    half = _scores(offline.load(dfs, ref).predict(records))
    diff = np.abs(half - exact).max()
    assert 0 < diff < 0.05, diff  # not fp32's bits, yet close
    assert np.mean(half.argmax(1) == exact.argmax(1)) >= 0.9
    rows = precision.AGREEMENT.rows(ref)
    assert 0 < rows <= len(records)  # the sample, not the warm-up's zeros
    k = min(precision.SAMPLE_ROWS, len(records))
    want = float(np.mean(half[:k].argmax(1) == exact[:k].argmax(1)))
    assert precision.AGREEMENT.share(ref) == pytest.approx(want, abs=1 / k)


def test_fp16_on_a_cpu_and_bf16_for_a_keras_model_are_refused_in_one_line(
        dfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mv = tm.pt_digits(dfs, "digits")
    _choose(monkeypatch, "fp16")
    with pytest.raises(ConfigError, match="fp16 runs on a GPU only; on the CPU use bf16"):
        offline.load(dfs, f"digits:{mv.version}")
    _choose(monkeypatch, "bf16")
    with pytest.raises(PermanentError, match="bf16 is for torch models; a tensorflow model"):
        adapters.adapter_for("tensorflow", "tensorflow")
    with pytest.raises(ConfigError, match="unknown precision 'int8'"):
        precision.select("int8")


@pytest.mark.slow
def test_a_bf16_scorer_exports_its_agreement_with_fp32_on_metrics(
        settings: Settings, conn: KafkaConnection, dfs: Path, stream: str, data: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    mv = tm.pt_digits(dfs, stream)
    pngs = [sm.encode(img) for img in sm.digits(128)]  # raw PNG messages
    _choose(monkeypatch, "fp32")
    exact = offline.load(dfs, f"{stream}:{mv.version}").predict(list(pngs))
    monkeypatch.setattr(precision, "_chosen", [])
    monkeypatch.setattr(adapters, "_chosen", [])
    keys = [f"p{i}" for i in range(len(pngs))]
    produce(conn, data, [(k, png, "image/png") for k, png in zip(keys, pngs, strict=True)])
    with ready_scorer(settings, conn, precision="bf16") as scorer:
        msgs = read_topic(conn, predictions_topic(stream), expect=len(pngs))
        status, body = http_get(scorer.http_port, "/metrics")
    assert status == 200
    got = {p["key"]: p for p in (json.loads(m.value()) for m in msgs)}
    same = np.mean([got[k]["label"] == e["label"] for k, e in zip(keys, exact, strict=True)])
    assert same >= 0.9
    line = re.search(rb'^headrace_scorer_precision_agreement\{[^}]*model="%s"[^}]*\} (\S+)$'
                     % stream.encode(), body, re.M)
    assert line is not None, body.decode()[-2000:]
    share = float(line.group(1))
    assert 0.9 <= share <= 1.0
    assert share == precision.AGREEMENT.share(f"{stream}:{mv.version}")
