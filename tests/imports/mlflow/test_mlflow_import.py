"""``headrace models import models:/NAME/1 | models:/NAME@champion | runs:/RUN/model`` from a
real tracking server, for models MLflow's own client logged (sklearn, XGBoost, LightGBM,
ONNX): each becomes a version whose lineage names the run and the registry version, and the
stream scores it on the embedded broker exactly as ``headrace predict`` does, record by record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.cli import main
from headrace.core.settings import Settings
from headrace.scorers import adapters
from headrace.store import versions
from headrace.streams.clients import KafkaConnection
from tests.fixtures import score
from tests.imports.mlflow.conftest import FLAVORS, Logged
from tests.scorers.conftest import data, send_json, stream  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow
FORMS = ("models:/{name}/1", "models:/{name}@champion", "runs:/{run_id}/model")


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def _records(mv: versions.ModelVersion, rows: dict[str, list[float]]) -> list[dict[str, Any]]:
    """The reference rows as records of the version's own input signature."""
    n = len(next(iter(rows.values())))
    matrix = np.stack([np.asarray(v, np.float64) for v in rows.values()], axis=1)
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for inp in mv.manifest.input_signature():
        for i in range(n):
            if inp.columns:
                out[i].update({c: float(rows[c][i]) for c in inp.columns})
            elif inp.name in rows:
                out[i][inp.name] = float(rows[inp.name][i])
            else:  # one tensor of every column, in the producer's order
                out[i][inp.name] = [float(v) for v in matrix[i]]
    return out


@pytest.mark.parametrize("flavor", FLAVORS)
def test_an_mlflow_model_imported_by_each_uri_form_scores_from_the_stream_as_predict_does(
        flavor: str, settings: Settings, conn: KafkaConnection, dfs: Path,
        stream: str, data: str, mlflow_server, logged_models: Logged,  # noqa: F811
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    m = logged_models.models[flavor]
    monkeypatch.setenv("HEADRACE_MLFLOW_TRACKING_URI", mlflow_server.url)
    for i, form in enumerate(FORMS, 1):
        uri = form.format(**m)
        code, out, err = _cli(capsys, "--dfs-root", str(dfs), "models", "import", uri,
                              "--name", stream, "--promote")
        assert code == 0, err
        mv = versions.load_version(dfs, stream, i)
        lineage = json.dumps(mv.manifest.extra)
        assert m["run_id"] in lineage and uri in lineage
    prod = versions.resolve(dfs, stream)
    assert prod.version == len(FORMS)

    records = _records(prod, logged_models.rows)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in records))
    by_version = []
    for v in range(1, len(FORMS) + 1):  # the three forms name one model
        monkeypatch.setattr(adapters, "_chosen", [])
        code, out, err = _cli(capsys, "--dfs-root", str(dfs), "predict", f"{stream}:{v}",
                              str(rows), "--json")
        assert code == 0, err
        by_version.append([json.loads(line) for line in out.splitlines()])
    want = by_version[-1]
    for other in by_version[:-1]:
        assert [o["label"] for o in other] == [w["label"] for w in want]
        np.testing.assert_allclose([o["scores"] for o in other], [w["scores"] for w in want],
                                   atol=1e-6, rtol=0)
    # The imported model predicts what its producer did (converted models within float32).
    np.testing.assert_allclose([w["scores"] for w in want], m["proba"], atol=1e-4, rtol=0)
    keys = send_json(conn, data, records)
    monkeypatch.setattr(adapters, "_chosen", [])
    msgs, _ = score(settings, conn, expect=len(records))
    got = {p["key"]: p for p in (json.loads(x.value()) for x in msgs)}
    assert sorted(got) == sorted(keys)
    for key, w in zip(keys, want, strict=True):
        assert got[key]["model_version"] == 3 and got[key]["label"] == w["label"]
        np.testing.assert_allclose(got[key]["scores"], w["scores"], atol=1e-6, rtol=0)
