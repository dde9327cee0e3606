"""``headrace datasets put | list | show`` as a user runs them: what lands on the DFS, what is
printed, and one-line refusals for inputs that cannot be a dataset."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from headrace.cli import main
from tests.trainers import families_data as fd


def run(dfs: Path, *args: str) -> int:
    return main(["--dfs-root", str(dfs), *args])


def test_put_list_and_show_a_jsonl_file_with_a_forced_kind(
        dfs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = fd.intents_jsonl(tmp_path / "chats.jsonl", rows=50)
    assert run(dfs, "datasets", "put", str(src), "--name", "chats",
               "--kind", "utterance=category") == 0
    out = capsys.readouterr().out
    assert "datasets/chats.parquet: 50 rows" in out and "category" in out
    table = pq.read_table(dfs / "datasets" / "chats.parquet")
    assert table.num_rows == 50 and table.column_names == ["utterance", "label"]
    assert run(dfs, "datasets", "list") == 0
    assert "datasets/chats.parquet" in capsys.readouterr().out
    assert run(dfs, "datasets", "show", "chats") == 0
    out = capsys.readouterr().out
    assert "label (label)" in out and "greet" in out and "fingerprint" in out


@pytest.mark.parametrize(("make", "args", "message"), [
    (lambda p: p / "missing.csv", [], "does not exist"),
    (lambda p: (p / "x.txt").write_text("hi") and p / "x.txt", [], "use a .parquet, .csv"),
    (lambda p: fd.tabular_csv(p / "iris.csv", "iris"), ["--image-column", "x0"],
     "cannot be a image column"),
    (lambda p: (p / "empty").mkdir() or p / "empty", [], "holds no class sub-folders"),
])
def test_put_refuses_what_cannot_be_a_dataset_with_one_line(
        dfs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], make, args, message
) -> None:  # type: ignore[no-untyped-def]
    rc = run(dfs, "datasets", "put", str(make(tmp_path)), *args)
    err = capsys.readouterr().err.strip()
    assert rc != 0 and message in err and len(err.splitlines()) == 1, err
    assert not (dfs / "datasets").exists() or not list((dfs / "datasets").iterdir())
