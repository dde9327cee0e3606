"""`send` warns, before it sends, when the records lack some of the production model's inputs
(the scorer would dead-letter every one of them); records that carry them all send quietly."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from headrace.cli import main
from headrace.store.manifest import Manifest
from headrace.store.versions import publish, set_alias
from headrace.streams.clients import KafkaConnection
from tests.fixtures import read_all

REPO = Path(__file__).resolve().parents[2]


def _model(dfs: Path, name: str, features: tuple[str, ...]) -> None:
    # send reads only the manifest (the inputs), never the model file itself.
    manifest = Manifest(name=name, framework="tensorflow", task="classifier",
                        features=features, label="label", classes=("0", "1", "2"))
    mv = publish(dfs, manifest, lambda d: (d / "model.keras").write_bytes(b"not read"))
    set_alias(dfs, name, mv.version)


@pytest.mark.parametrize(("features", "warned"), [
    (tuple(f"f{i}" for i in range(40)), True),   # 8 inputs the example records lack
    (tuple(f"f{i}" for i in range(32)), False),  # the quick start's model: all there
])
def test_send_warns_before_sending_when_records_lack_model_inputs(
        broker: str, dfs: Path, conn: KafkaConnection, capsys: pytest.CaptureFixture[str],
        private_state: Path, features: tuple[str, ...], warned: bool) -> None:
    stream = f"s{uuid.uuid4().hex[:8]}"
    assert main(["--bootstrap", broker, "topics", "--create", "--stream", stream]) == 0
    _model(dfs, stream, features)
    capsys.readouterr()
    assert main(["--bootstrap", broker, "--dfs-root", str(dfs), "send", stream,
                 str(REPO / "examples" / "records.jsonl")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    if warned:
        assert len(err) == 1 and err[0].startswith(
            f"warning: the records lack 8 of the 40 inputs of model {stream}:1 (f32, f33,"), err
        assert "the scorer will dead-letter them" in err[0]
    else:
        assert err == []
    assert len(read_all(conn, f"data.{stream}")) == 5  # a warning, not a refusal
