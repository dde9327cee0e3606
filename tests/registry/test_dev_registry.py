"""`./dev registry` (tools/registry.py): prints `registry: URL` and serves the Confluent API there
until SIGTERM, or, where Apicurio cannot be built, says why in one line and exits 1."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tools.registry import RegistryUnavailable, build

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_dev_registry_prints_its_url_or_says_in_one_line_why_not() -> None:
    try:
        build()
        buildable = True
    except RegistryUnavailable:
        buildable = False
    proc = subprocess.Popen([sys.executable, str(ROOT / "tools" / "registry.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        if not buildable:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 1 and out == ""
            lines = err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("registry: ")
            assert "Traceback" not in err
            return
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("registry: http://127.0.0.1:") and line.rstrip().endswith(
            "/apis/ccompat/v7")
        url = line.split(" ", 1)[1].strip()
        with urllib.request.urlopen(url + "/subjects", timeout=10) as r:
            assert json.loads(r.read()) == []
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
