"""A model trained by a real job with a category column, scored on the broker.

The trainer feeds categories through its backend and the scorer through its adapter
(``store.tokens``); both must give the same scores for the same records, in every framework.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pytest

from headrace.contracts import ModelSpec, TrainRequested
from headrace.core.settings import Settings
from headrace.store import versions
from headrace.streams.clients import KafkaConnection
from headrace.trainers import jobs
from headrace.trainers.backends import get_backend
from headrace.trainers.dataset_files import put_dataset
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.inputs import Inputs
from headrace.trainers.job_process import run_job
from tests.scorers.conftest import score
from tests.scorers.test_scoring_signatures import dead_reasons, json_item, produce, split
from tests.trainers.test_families import one_thread


def _train(dfs: Path, tmp_path: Path, name: str, framework: str) -> versions.ModelVersion:
    rng = np.random.default_rng(0)
    colour = rng.choice(["red", "green", "blue"], 240)
    size = rng.normal(1000, 300, 240)
    label = (colour == "red") | (size > 1200)
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps({"colour": str(c), "size": float(s), "label": int(y)})
                            + "\n" for c, s, y in zip(colour, size, label, strict=True)))
    uri = put_dataset(root=dfs, path=path).uri
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name=name,
                         framework=framework, dataset_uri=uri,
                         spec=ModelSpec(epochs=15, batch_size=32, hidden=(16,),
                                        learning_rate=0.02))
    jid, _ = jobs.create_request(dfs, req)
    one_thread(framework)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.version is not None and st.promoted, st
    return versions.load_version(dfs, name, st.version)


@pytest.mark.parametrize("framework", ["mxnet", "tensorflow", "torch"])
def test_a_trained_category_model_scores_on_the_broker_as_the_trainer_predicts(
        framework: str, settings: Settings, conn: KafkaConnection, dfs: Path, stream: str,
        data: str, tmp_path: Path) -> None:
    mv = _train(dfs, tmp_path, stream, framework)
    rows = [("red", 900.0), ("green", 1500.0), ("blue", 800.0), ("purple", 700.0),
            ("red", 1300.0), ("green", 950.0)]  # purple: never seen in training
    produce(conn, data, [json_item(f"r{i}", {"colour": c, "size": s})
                         for i, (c, s) in enumerate(rows)]
            + [json_item("no-colour", {"size": 1000.0})])
    msgs, dead = score(settings, conn, expect=len(rows), dead=1)
    js, _ = split(msgs)

    m = mv.manifest
    x = Inputs({"features": np.array([[s] for _, s in rows], np.float32),
                "colour": np.array([c for c, _ in rows], object)}, m.input_signature())
    offline = get_backend(m.framework).load_exported(
        mv.path, task=m.task, n_features=len(m.features),
        signature=m.input_signature()).predict(x)
    for i in range(len(rows)):
        assert js[f"r{i}"]["model_version"] == mv.version
        np.testing.assert_allclose(js[f"r{i}"]["scores"], offline[i], rtol=1e-4, atol=1e-6)
    # The rule it learned: red, or big, is class 1.
    assert [js[f"r{i}"]["label"] for i in (0, 1, 2)] == [m.classes[1], m.classes[1],
                                                         m.classes[0]]
    assert dead_reasons(dead) == {"no-colour": "input 'colour' is missing"}
