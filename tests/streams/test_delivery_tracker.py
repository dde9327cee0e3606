"""The delivery callback never waits (D44).

After a broker restart a scorer hung for good inside ``Producer.flush``: its delivery callback
(``Deliveries.__call__``) waited on the tracker's lock, which nothing on any Python stack held
(stacks dumped by the scorer's overdue exit). The scorer neither scored, committed, polled nor
stopped on SIGTERM; its group went on without it, or, both scorers hung, with nobody. The
callback now takes no lock: what it records is taken by ``take_all`` now or on the next call.
"""

from __future__ import annotations

import threading
from typing import Any

from confluent_kafka import KafkaError

from headrace.streams.producing import Deliveries

NO_MESSAGE: Any = None  # errors of these codes never read their message


def test_a_delivery_callback_returns_while_another_thread_takes_the_failures() -> None:
    d = Deliveries()
    hold = getattr(d, "_lock", None)  # the old tracker's: held by a taker, as seen hung
    if hold is not None:
        hold.acquire()
    done = threading.Event()

    def report() -> None:
        d(KafkaError(KafkaError._MSG_TIMED_OUT), NO_MESSAGE)
        done.set()

    threading.Thread(target=report, daemon=True).start()
    returned = done.wait(2.0)
    if hold is not None:
        hold.release()
    assert returned, "the delivery callback waited on a lock"
    assert [e.code() for e in d.take()] == [KafkaError._MSG_TIMED_OUT]


def test_failures_reported_while_taking_are_taken_once_never_lost() -> None:
    d = Deliveries()
    n = 20_000
    stop = threading.Event()
    taken: list[KafkaError] = []

    def taker() -> None:
        while not stop.is_set():
            taken.extend(d.take())

    t = threading.Thread(target=taker)
    t.start()
    for _ in range(n):
        d(KafkaError(KafkaError._MSG_TIMED_OUT), NO_MESSAGE)
    stop.set()
    t.join()
    taken.extend(d.take())
    assert len(taken) == n
