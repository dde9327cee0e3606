"""``python -m headrace.scorers``: a scorer configured by the environment alone (for pods).

HEADRACE_* (Kafka, DFS) and HEADRACE_SCORER_* (stream, model, batching, probes) settings.
"""

from __future__ import annotations

import logging
import sys
import threading

from headrace.core.errors import HeadraceError
from headrace.core.settings import load_settings
from headrace.scorers.engine.settings import load_scorer_settings
from headrace.scorers.serving import install_signal_handlers, run


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings()
        scorer = load_scorer_settings()
        stop = threading.Event()
        install_signal_handlers(stop, grace_s=scorer.grace_s)
        run(settings, scorer, stop)
    except HeadraceError as exc:
        print(f"headrace: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
