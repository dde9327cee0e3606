"""Run a blocking body on a thread of its own while the main thread only waits for it.

Python runs a signal handler on the main thread, and only once that thread is back from C.
A process whose main thread sits in a native call with no deadline (librdkafka's synchronous
``Consumer.commit`` against a broker gone for good: D46, 50 minutes) never sees its SIGTERM,
and the handler's overdue-exit watchdog is never armed. Waiting here keeps the handlers live.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

WAIT_S = 0.5  # how soon a signal is handled at most, while the body runs


def run_off_main(body: Callable[[], None], *, name: str) -> None:
    """Run ``body`` on a daemon thread named ``name`` and wait for it; raise what it raised.
    From a thread other than the main one it simply calls ``body`` (no signal to keep live)."""
    if threading.current_thread() is not threading.main_thread():
        body()
        return
    raised: list[BaseException] = []

    def target() -> None:
        try:
            body()
        except BaseException as exc:  # handed to the caller below
            raised.append(exc)

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(WAIT_S)
    if raised:
        raise raised[0]
