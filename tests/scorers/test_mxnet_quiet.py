"""Loading an MXNet model in the scorer shows none of MXNet's warnings (the FutureWarning of
its NumPy alias at import, the UserWarning "Cannot decide type" on every SymbolBlock import):
Headrace silences them where it triggers them. A fresh process, so the import really happens,
with Python's default filters, so what is checked is what a user would see."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys, warnings
from pathlib import Path
# Python's default filters, as a user's `headrace score` has them: recorded, not printed.
with warnings.catch_warnings(record=True) as at_import:
    from headrace.scorers.engine.models import load_model
    import headrace.scorers.adapters.mxnet  # noqa: F401
from tests.scorers.conftest import publish_mx
publish_mx(Path(sys.argv[1]), "quiet")
with warnings.catch_warnings(record=True) as at_load:
    load_model(root=Path(sys.argv[1]), name="quiet", alias="production", device="cpu",
               max_batch=8)
for w in [*at_import, *at_load]:
    print(f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})")
"""


def test_the_mxnet_adapter_imports_and_loads_without_warnings(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "", proc.stdout
