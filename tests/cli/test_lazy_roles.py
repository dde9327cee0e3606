"""The CLI imports no role's library until a command needs it, so `pip install headrace` (or
one extra) runs `headrace --help` and every other role's commands' help. tools/check_wheel.sh
proves it on the built wheel in CI; this catches an eager import here in a second."""

from __future__ import annotations

import json
import subprocess
import sys

from headrace.cli._extras import EXTRA_OF

SCRIPT = """
import json, sys
from headrace.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


def _loaded(*args: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_help_and_version_import_no_role_library() -> None:
    for args in (["--help"], ["score", "--help"], ["topology", "plan", "--help"]):
        assert _loaded(*args) & set(EXTRA_OF) == set(), args
