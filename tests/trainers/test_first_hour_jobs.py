"""What a new user runs into with jobs: a gates file written as YAML users write it, every
error of a bad one named, and a re-run of an old job that must not move production back."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.contracts import JobEvent, ModelPublished
from headrace.contracts.gates import ConfusionLimit, load_gates
from headrace.core.errors import ValidationFailed
from headrace.store import versions
from headrace.streams.clients import KafkaConnection
from headrace.streams.reading import read_events
from headrace.streams.topics import ControlTopics
from headrace.trainers import jobs
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.job_process import run_job
from tests.trainers.conftest import request


def _gates(dfs: Path, text: str) -> None:
    (dfs / "config").mkdir(exist_ok=True)
    (dfs / "config" / "gates.yaml").write_text(text)


def test_a_gates_file_with_unquoted_true_and_numeric_classes_is_read_as_written(
        dfs: Path) -> None:
    # YAML 1.1 reads `true:` as a boolean key and `0` as a number.
    _gates(dfs, "models:\n  demo:\n    class_recall: {2: 0.7}\n"
                "    max_confusion: [{true: 0, predicted: 1, max_fraction: 0.1}]\n")
    gate = load_gates(dfs, "demo")
    assert gate.max_confusion == [ConfusionLimit(true="0", predicted="1", max_fraction=0.1)]
    assert gate.class_recall == {"2": 0.7}


def test_a_bad_gates_file_names_every_error_on_a_line_of_its_own(dfs: Path) -> None:
    _gates(dfs, "models:\n  demo:\n    min: {accuracy: high}\n"
                "    max_confusion: [{true: '0', predicted: '1', max_fraction: 2}]\n")
    with pytest.raises(ValidationFailed) as info:
        load_gates(dfs, "demo")
    lines = str(info.value).splitlines()
    assert lines[0].endswith("2 errors:"), lines
    assert lines[1].startswith("  models.demo.min.accuracy: ")
    assert lines[2].startswith("  models.demo.max_confusion.0.max_fraction: ")


def test_a_job_failed_by_its_gates_file_keeps_every_error_in_its_reason(
        dfs: Path, demo: str, conn: KafkaConnection, topics: ControlTopics) -> None:
    _gates(dfs, "models:\n  demo:\n    min: {accuracy: high}\n    bogus: 1\n")
    jid, _ = jobs.create_request(dfs, request(demo))
    assert run_job(root=dfs, job_id=jid, conn=conn, topics=topics) == ExitCode.PERMANENT
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.reason is not None
    assert "2 errors:" in st.reason and "min.accuracy" in st.reason and "bogus" in st.reason
    assert len(st.reason.splitlines()) == 3
    assert versions.list_models(dfs) == []


def test_rerunning_an_old_finished_job_never_moves_production_backwards(
        dfs: Path, demo: str, conn: KafkaConnection, topics: ControlTopics) -> None:
    _gates(dfs, "models:\n  demo: {}\n")  # no regression check: both versions promote
    first, _ = jobs.create_request(dfs, request(demo))
    assert run_job(root=dfs, job_id=first, conn=conn, topics=topics) == ExitCode.OK
    second, _ = jobs.create_request(dfs, request(demo))
    assert run_job(root=dfs, job_id=second, conn=conn, topics=topics) == ExitCode.OK
    assert versions.read_alias(dfs, "demo").version == 2  # type: ignore[union-attr]

    assert run_job(root=dfs, job_id=first, conn=conn, topics=topics) == ExitCode.OK

    assert versions.read_alias(dfs, "demo").version == 2  # type: ignore[union-attr]
    published = read_events(conn, topics.models, ModelPublished)
    assert [p.version for p in published] == [1, 2]
    st = jobs.read_status(dfs, first)
    assert st is not None and st.promoted is False and st.version == 1
    said = " ".join(e.message or "" for e in read_events(conn, topics.jobs, JobEvent)
                    if e.job_id == first)
    assert "demo:1 not promoted: production is at the newer demo:2" in said
    assert "never moves production backwards" in said


def test_rerunning_a_job_whose_version_was_rolled_back_from_does_not_promote_it_again(
        dfs: Path, demo: str, conn: KafkaConnection, topics: ControlTopics) -> None:
    _gates(dfs, "models:\n  demo: {}\n")
    first, _ = jobs.create_request(dfs, request(demo))
    assert run_job(root=dfs, job_id=first, conn=conn, topics=topics) == ExitCode.OK
    second, _ = jobs.create_request(dfs, request(demo))
    assert run_job(root=dfs, job_id=second, conn=conn, topics=topics) == ExitCode.OK
    versions.set_alias(dfs, "demo", 1, reason="rollback from v2")

    assert run_job(root=dfs, job_id=second, conn=conn, topics=topics) == ExitCode.OK

    assert versions.read_alias(dfs, "demo").version == 1  # type: ignore[union-attr]
    st = jobs.read_status(dfs, second)
    assert st is not None and st.promoted is False
    assert "was production before" in " ".join(st.gate_reasons)
