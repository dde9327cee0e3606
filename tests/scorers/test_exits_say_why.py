"""A scorer never ends with nothing in its log (D41, D44).

D41: in CI a scorer died during a fault with nothing in its log (a native abort or crash prints
no Python line). D44: a scorer hung in a flush outlived its SIGTERM grace and exited 3 saying
only that. A fatal signal now prints every thread's stack (``faulthandler``), and so does the
overdue exit; the harness says how a process ended (a SIGKILL writes nothing).
The scorer's loop runs off the main thread (D46: ``tests/faults/test_sigterm_in_commit.py``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from headrace.core.errors import FatalError
from headrace.core.off_main import run_off_main
from tests.faults.harness import exit_note

SCRIPT = """
import os, signal, sys, threading, time
from headrace.scorers.serving import install_signal_handlers
stop = threading.Event()
install_signal_handlers(stop, grace_s=0.5)
print("ready", flush=True)
if sys.argv[1] == "abort":
    os.abort()  # as librdkafka's failed assertion does
def stuck_in_a_flush():
    time.sleep(60)
stuck_in_a_flush()  # SIGTERM arrives; the loop never finishes
"""


def _scorer_like(mode: str, *, term: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    p = subprocess.Popen([sys.executable, "-c", SCRIPT, mode], env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "ready"
    if term:
        p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def test_a_native_abort_leaves_every_threads_stack_in_the_log() -> None:
    r = _scorer_like("abort")
    assert r.returncode == -signal.SIGABRT
    assert "Fatal Python error: Aborted" in r.stderr, r.stderr
    assert "in <module>" in r.stderr  # the stack, not just a line


def test_a_scorer_past_its_grace_says_where_it_was_stuck() -> None:
    r = _scorer_like("hang", term=True)
    assert r.returncode == 3
    assert "did not stop within" in r.stderr and "where each thread was" in r.stderr
    assert "in stuck_in_a_flush" in r.stderr, r.stderr


def test_what_the_scoring_thread_raises_reaches_the_caller() -> None:
    ran_on: list[str] = []

    def body() -> None:
        ran_on.append(threading.current_thread().name)
        raise FatalError("the model's directory is gone")

    with pytest.raises(FatalError, match="the model's directory is gone"):
        run_off_main(body, name="scorer")
    # pytest runs a test on the main thread (xdist's workers too): the body ran off it.
    assert threading.current_thread() is threading.main_thread()
    assert ran_on == ["scorer"]


def test_sigusr2_prints_where_each_thread_is_and_the_scorer_goes_on() -> None:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    p = subprocess.Popen([sys.executable, "-c", SCRIPT, "hang"], env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    assert p.stdout.readline().strip() == "ready"
    p.send_signal(signal.SIGUSR2)
    first = p.stderr.readline()
    assert first.startswith(("Thread 0x", "Current thread")), first
    assert p.poll() is None  # still running
    p.kill()
    p.communicate(timeout=30)


def test_the_harness_says_how_a_process_ended() -> None:
    assert exit_note(None) == ""
    assert "SIGKILL (exit -9)" in exit_note(-9)
    assert "exited 3" in exit_note(3)
