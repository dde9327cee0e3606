"""`datasets put` says when the file has no label column, and `datasets show` counts the label
that `put` recorded (``--label species``) without being told again."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.cli import main


def test_put_warns_when_the_file_has_no_label_column(
        tmp_path: Path, dfs: Path, private_state: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "nolabel.csv"
    src.write_text("a,b\n1,2\n3,4\n")
    assert main(["--dfs-root", str(dfs), "datasets", "put", str(src)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["warning: nolabel.csv has no label column 'label' (columns: a, b); name it "
                   "with `--label COLUMN` to train on it"]
    assert (dfs / "datasets" / "nolabel.parquet").is_file()  # put anyway: a warning


def test_show_counts_the_label_put_recorded(
        tmp_path: Path, dfs: Path, private_state: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "iris.csv"
    src.write_text("a,b,species\n1,2,setosa\n3,4,virginica\n5,6,setosa\n")
    assert main(["--dfs-root", str(dfs), "datasets", "put", str(src), "--label", "species"]) == 0
    capsys.readouterr()
    assert main(["--dfs-root", str(dfs), "datasets", "show", "iris"]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.out.splitlines()
            if line.startswith("│")]
    assert ["species", "label", "string"] in rows
    assert ["setosa", "2"] in rows and ["virginica", "1"] in rows
