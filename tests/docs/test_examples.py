"""Every file in examples/ parses with the project's own loaders and does what the docs say;
the docs show these files verbatim (a fenced block tagged with the file's path)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.contracts.gates import load_gates
from headrace.streams.sending import read_records
from headrace.topology.cluster import load_cluster
from headrace.topology.planning import plan_placement
from headrace.trainers.control.triggers import load_triggers
from headrace.trainers.datasets import make_demo

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# ```yaml examples/cluster.yaml  -> the block must equal that file
TAGGED = re.compile(r"^```\w* (examples/\S+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def test_the_example_cluster_places_every_partition() -> None:
    spec = load_cluster(EXAMPLES / "cluster.yaml")
    result = plan_placement(cluster=spec)
    assert result.stats.partitions == 15 and result.stats.placed == 15
    assert not result.unplaced


def test_the_example_triggers_have_a_schedule_an_event_rule_and_a_drift_rule() -> None:
    trig = load_triggers(EXAMPLES / "triggers.yaml")
    assert [s.name for s in trig.schedules] == ["nightly"]
    assert [(r.name, r.kind) for r in trig.rules] == [("fresh-data", "event"),
                                                      ("drifted", "drift")]


def test_the_example_gates_file_loads_for_its_model_and_as_the_default(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    shutil.copy(EXAMPLES / "gates.yaml", tmp_path / "config" / "gates.yaml")
    demo = load_gates(tmp_path, "demo")
    assert demo.min == {"accuracy": 0.8} and demo.max_confusion[0].true == "0"
    assert load_gates(tmp_path, "other").max_regression == {"accuracy": 0.01}


def test_the_example_records_hold_the_same_rows_in_every_format(tmp_path: Path) -> None:
    tables = [read_records(EXAMPLES / f"records.{s}") for s in ("jsonl", "csv", "parquet")]
    # Every input of the model the quick start trains on `headrace datasets make-demo`'s data.
    demo = pq.read_table(make_demo(out=tmp_path / "demo.parquet", rows=10))
    features = [c for c in demo.column_names if c != "label"]
    assert tables[0].num_rows == 5 and tables[0].column_names == features
    for t in tables[1:]:
        assert t.cast(tables[0].schema).equals(tables[0].cast(tables[0].schema))
    assert all(pa.types.is_floating(f.type) for f in tables[0].schema)


def _tagged_blocks() -> list[tuple[str, str, str]]:
    return [(doc.name, path, body) for doc in DOCS
            for path, body in TAGGED.findall(doc.read_text())]


def test_the_docs_show_example_files_verbatim() -> None:
    blocks = _tagged_blocks()
    assert {p for _, p, _ in blocks} >= {"examples/cluster.yaml", "examples/triggers.yaml",
                                         "examples/gates.yaml"}


@pytest.mark.parametrize(("doc", "path", "body"), _tagged_blocks(),
                         ids=[f"{d}:{p}" for d, p, _ in _tagged_blocks()])
def test_a_doc_block_tagged_with_an_example_path_equals_that_file(
        doc: str, path: str, body: str) -> None:
    assert body == (REPO / path).read_text(), f"{doc} shows {path} differently from the file"
