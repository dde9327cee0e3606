"""JSON decoding in helper processes, so it overlaps with scoring instead of sharing one GIL.

Decoding a JSON record costs about as much as consuming, scoring and publishing it together, and
all of it holds the GIL. The worker hands the next batch's JSON records to ``processes`` helpers
(``python -m headrace.scorers.wire.decode_pool``; numpy and msgspec only) and scores the current
batch meanwhile. A helper decodes with the very same ``json_rows.decode_rows`` as the worker
would, so the rows and every dead-letter reason are identical either way.

Frames over the helper's stdin/stdout: a request is ``_REQ`` (features JSON length, records,
payload bytes), the features, each record's length (int64) and the records back to back; a reply
is ``_REP`` (good rows, width, errors JSON length), their positions (int64), the float32 matrix and
the errors. A helper that dies, hangs or answers nonsense is killed; the batch is decoded in the
worker and the helpers are started again after ``RESTART_AFTER_S``. ``start`` is called
before the scorer reports ready, so the first batch does not pay for the helpers' imports.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from headrace.scorers.wire.json_rows import JsonRows, decode_rows

log = logging.getLogger(__name__)

_REQ = struct.Struct("<QQQ")
_REP = struct.Struct("<QQQ")
PIPE_BYTES = 1 << 20  # bigger pipes: fewer wake-ups per batch (Linux F_SETPIPE_SZ, best effort)
_F_SETPIPE_SZ = 1031
# A helper silent this long is hung: 5 s plus 20 µs a record (it decodes one in ~5 µs).
REPLY_BASE_S = 5.0
REPLY_PER_RECORD_S = 20e-6
RESTART_AFTER_S = 10.0


class HelperFailed(Exception):
    """A helper died, hung or broke the protocol."""


def _read_exact(fd: int, n: int, deadline: float | None = None) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise HelperFailed("no reply from the decode helper")
        k = os.readv(fd, [view[got:]])
        if k == 0:
            raise HelperFailed("the decode helper closed its pipe")
        got += k
    return buf


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data).cast("B")
    while len(view):
        view = view[os.write(fd, view):]


def _grow_pipe(fd: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, _F_SETPIPE_SZ, PIPE_BYTES)


class _Helper:
    def __init__(self) -> None:
        env = dict(os.environ)
        # The helper imports this very package, wherever it was loaded from.
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "headrace.scorers.wire.decode_pool"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, bufsize=0, close_fds=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.wfd = self.proc.stdin.fileno()
        self.rfd = self.proc.stdout.fileno()
        _grow_pipe(self.wfd)
        _grow_pipe(self.rfd)
        # Writing a batch blocks until the helper has read most of it: not on the scoring thread.
        self.write_error: str | None = None
        self._outbox: queue.SimpleQueue[list[bytes] | None] = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._write_loop, name="decode-pool-writer",
                                        daemon=True)
        self._writer.start()

    def send(self, values: Sequence[bytes], features: bytes) -> None:
        """Queue one request; the writer thread pushes it through the pipe (GIL released)."""
        if self.write_error is not None:
            raise HelperFailed(self.write_error)
        lengths = np.fromiter(map(len, values), np.int64, len(values))
        blob = b"".join(values)  # one write, so the writer takes the GIL only once a batch
        self._outbox.put([_REQ.pack(len(features), len(values), len(blob)) + features
                          + lengths.tobytes(), blob])

    def _write_loop(self) -> None:
        while (parts := self._outbox.get()) is not None:
            try:
                for part in parts:
                    _write_all(self.wfd, part)
            except OSError as exc:
                self.write_error = f"cannot write to the decode helper: {exc}"
                return

    def receive(self, records: int, width: int) -> JsonRows:
        deadline = time.monotonic() + REPLY_BASE_S + REPLY_PER_RECORD_S * records
        if self.write_error is not None:
            raise HelperFailed(self.write_error)
        good, got_width, err_len = _REP.unpack(_read_exact(self.rfd, _REP.size, deadline))
        if good > records or got_width != width:
            raise HelperFailed(f"the decode helper answered {good}x{got_width} rows for "
                               f"{records} records of {width} features")
        ok = np.frombuffer(_read_exact(self.rfd, 8 * good, deadline), np.int64)
        x = np.frombuffer(_read_exact(self.rfd, 4 * good * width, deadline), np.float32)
        errors = [(int(i), str(stage), str(reason)) for i, stage, reason
                  in json.loads(bytes(_read_exact(self.rfd, err_len, deadline)))]
        return x.reshape(good, width), ok, errors

    def close(self, *, kill: bool = False) -> None:
        if kill:
            self.proc.kill()
        self._outbox.put(None)
        self._writer.join(timeout=2.0)
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class DecodePool:
    """``submit`` the next batch's JSON records, ``result`` once the current batch is scored.

    One batch at a time; records are split into contiguous parts, one per helper.
    """

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._helpers: list[_Helper] = []
        self._parts: list[tuple[int, int]] = []  # (start, records) per helper in flight
        self._down_until = 0.0
        self._width = 0

    def start(self) -> DecodePool:
        """Start the helpers (raises ``OSError`` when one cannot be, with none left running)."""
        try:
            for _ in range(self.processes):
                self._helpers.append(_Helper())
        except OSError:
            self.close(kill=True)
            raise
        return self

    @property
    def pids(self) -> list[int]:
        """The running helpers' process ids (none while they are down)."""
        return [h.proc.pid for h in self._helpers]

    def submit(self, values: Sequence[bytes], features: Sequence[str]) -> bool:
        """False (and nothing sent) when the helpers are down: decode in the worker instead."""
        if self._parts:
            raise RuntimeError("a batch is already being decoded")
        if not self._helpers:
            if time.monotonic() < self._down_until:
                return False
            try:
                self.start()
            except OSError as exc:
                self._fail(f"cannot start decode helpers: {exc}")
                return False
        names = json.dumps(list(features)).encode()
        self._width = len(features)
        step = -(-len(values) // len(self._helpers))
        try:
            for h, start in zip(self._helpers, range(0, len(values), step), strict=False):
                part = values[start:start + step]
                self._parts.append((start, len(part)))
                h.send(part, names)
        except HelperFailed as exc:
            self._fail(str(exc))
            return False
        return True

    def result(self) -> JsonRows | None:
        """The submitted records' rows, or None when a helper failed (decode them again)."""
        parts, self._parts = self._parts, []
        got: list[JsonRows] = []
        try:
            for h, (_, records) in zip(self._helpers, parts, strict=False):
                got.append(h.receive(records, self._width))
        except (HelperFailed, ValueError, TypeError) as exc:
            self._fail(str(exc))
            return None
        if len(got) == 1:
            return got[0]
        x = np.concatenate([g[0] for g in got])
        ok = np.concatenate([g[1] + start for g, (start, _) in zip(got, parts, strict=True)])
        errors = [(i + start, stage, reason) for g, (start, _) in zip(got, parts, strict=True)
                  for i, stage, reason in g[2]]
        return x, ok, errors

    def _fail(self, why: str) -> None:
        log.warning("decode helpers failed (%s); decoding in the scorer for %.0fs", why,
                    RESTART_AFTER_S)
        self._parts = []
        self._down_until = time.monotonic() + RESTART_AFTER_S
        self.close(kill=True)

    def close(self, *, kill: bool = False) -> None:
        helpers, self._helpers = self._helpers, []
        for h in helpers:
            h.close(kill=kill)


def serve(rfd: int, wfd: int) -> None:
    """The helper's loop: one reply per request, until the worker closes the pipe."""
    while True:
        try:
            head = _read_exact(rfd, _REQ.size)
        except HelperFailed:
            return  # the worker is gone
        flen, n, blen = _REQ.unpack(head)
        features = json.loads(bytes(_read_exact(rfd, flen)))
        ends = np.cumsum(np.frombuffer(_read_exact(rfd, 8 * n), np.int64)).tolist()
        blob = memoryview(_read_exact(rfd, blen))
        values = [blob[s:e] for s, e in zip([0, *ends][:-1], ends, strict=True)]
        x, ok, errors = decode_rows(values, features)
        err = json.dumps(errors).encode()
        _write_all(wfd, _REP.pack(len(ok), x.shape[1], len(err)))
        _write_all(wfd, ok.astype(np.int64, copy=False).tobytes())
        _write_all(wfd, x.tobytes())
        _write_all(wfd, err)


def main() -> None:
    # The worker stops the helper by closing its pipe: a Ctrl-C or SIGTERM sent to the whole
    # process group must not kill it mid-reply (or print a traceback).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    replies = os.dup(1)
    os.dup2(2, 1)  # a stray print goes to stderr, never into a reply
    serve(0, replies)


if __name__ == "__main__":
    main()
