"""A demo that fails keeps its scratch directory (DFS, jobs, logs) and says where, with the
likely cause of the failure in plain words."""

from __future__ import annotations

import re
import shutil
import socket
from pathlib import Path

from headrace.core.settings import load_settings
from headrace.ops.demo import run_demo


def test_a_failed_demo_names_the_likely_cause_and_keeps_its_scratch_directory() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    said: list[str] = []
    code = run_demo(settings=load_settings(bootstrap=dead, request_timeout_s=2), records=10,
                    epochs=1, say=said.append, keep_dfs=False)
    assert code == 1
    text = "\n".join(said)
    assert "demo failed at stage 'start the broker'" in text, text
    assert f"likely cause: the broker {dead} is not reachable from here" in text, text
    m = re.search(r"kept the scratch directory \(DFS, jobs and logs\) for a look: (\S+)", text)
    assert m, text
    kept = Path(m.group(1))
    try:
        assert (kept / "dfs").is_dir()
    finally:
        shutil.rmtree(kept, ignore_errors=True)
