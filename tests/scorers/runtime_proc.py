"""One scorer process on one runtime serving several streams, a real ``Scorer`` each (as
``headrace score`` runs one): ``python -m tests.scorers.runtime_proc RUNTIME STREAM=MODEL ...``
with HEADRACE_BOOTSTRAP and HEADRACE_DFS_ROOT set. Keras's backend is chosen by the first
``Scorer`` before any model (and so Keras) is imported. Runs until SIGTERM."""

from __future__ import annotations

import logging
import signal
import sys
import threading

from headrace.core.settings import load_settings
from headrace.scorers.engine.settings import load_scorer_settings
from headrace.scorers.serving import Scorer


def main(runtime: str, pairs: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = load_settings()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threads = []
    for pair in pairs:
        stream, model = pair.split("=")
        s = load_scorer_settings(stream=stream, model=model, runtime=runtime, device="cpu",
                                 http_port=0, http_host="127.0.0.1", max_wait_ms=20,
                                 batch_size=64, decode_processes=0, partitions="0")
        scorer = Scorer(settings, s)
        t = threading.Thread(target=scorer.run, args=(stop,), name=f"scorer-{stream}")
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
