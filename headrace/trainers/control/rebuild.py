"""Re-derive the control plane's job table from the DFS, which holds every job's request and
status (``jobs/<id>/request.json``, ``status.json``).

The table (a faust table on a changelog topic) is a cache of the DFS for the router. It can
lose rows: the broker lost its data (an in-memory broker restarted, a topic deleted), or the
control plane's producer died after a request was recorded on the DFS but before its row
reached the changelog (issue 34: requests consumed, recorded ``queued, attempts 0``, never run).

:func:`reconcile` runs on every start, after the table is recovered, before jobs are resumed:

* a job on the DFS with no row gets one, from its status;
* a job queued that never started (no attempt) is resumed by the start that follows
  (``ControlPlane.on_ready`` resumes queued rows), so a consumed request is never lost; its
  job id is its idempotency key's, so a redelivery of the same request still runs one job;
* a job with a ``request.json`` and no status (its router died in between; the claim is free)
  is recorded queued and resumed, as a redelivery would;
* a job running or retrying with no row is left alone unless ``full`` (``headrace control
  --rebuild-table``): this control plane cannot tell whether another one runs it.

With ``full`` every row is rewritten from the DFS (a row's executor handle is kept) and the
jobs that were running or retrying are resumed too (from their last checkpoint).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headrace.contracts import JobState
from headrace.core.errors import HeadraceError
from headrace.store.dfs import jobs_dir
from headrace.trainers import jobs
from headrace.trainers.control.plane import Table, row_of

log = logging.getLogger(__name__)
ACTIVE = (JobState.QUEUED, JobState.RUNNING)


@dataclass
class Reconciled:
    """What :func:`reconcile` did, by job id."""

    added: list[str] = field(default_factory=list)  # rows written from the DFS
    requeued: list[str] = field(default_factory=list)  # never-started jobs that will run
    left: list[str] = field(default_factory=list)  # running elsewhere? not resumed (not full)
    unreadable: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"job table re-derived from the DFS: {len(self.added)} row(s) added, "
                f"{len(self.requeued)} queued job(s) that never ran will run, "
                f"{len(self.left)} running job(s) without a row left alone (`headrace control "
                f"--rebuild-table` resumes them), {len(self.unreadable)} unreadable")


def never_started(st: jobs.JobStatus) -> bool:
    return st.state == JobState.QUEUED and st.attempts == 0 and st.started_at is None


def reconcile(root: Path, table: Table, *, full: bool = False) -> Reconciled:
    """Bring ``table`` up to what the DFS says (see the module notes); return what changed."""
    out = Reconciled()
    base = jobs_dir(root)
    if not base.is_dir():
        return out
    for d in sorted(base.iterdir()):
        if d.name.startswith(".") or not d.is_dir() or not (d / jobs.REQUEST).exists():
            continue
        jid = d.name
        row = table.get(jid)
        if row is not None and not full:
            continue
        try:
            added = _one(root, jid, table, row, full=full, out=out)
        except HeadraceError as exc:
            log.warning("job %s: not re-derived from the DFS: %s", jid, exc)
            out.unreadable.append(jid)
            continue
        if added:
            out.added.append(jid)
    if out.added or out.left or out.unreadable:
        log.warning("%s", out.line())
    return out


def _one(root: Path, jid: str, table: Table, row: dict[str, Any] | None, *, full: bool,
         out: Reconciled) -> bool:
    req = jobs.read_request(root, jid)
    st = jobs.read_status(root, jid)
    if st is None:
        with jobs.claim(root, jid) as mine:
            if not mine:  # a live router is recording it right now: its row follows
                return False
            st = jobs.read_status(root, jid) or jobs.write_status(
                root, jobs.initial_status(jid, req))
    if st.state in ACTIVE and not never_started(st) and not full:
        out.left.append(jid)
        return False
    new = {**row_of(st.state, req), "reason": st.reason, "started_at": st.started_at,
           "finished_at": st.finished_at, "version": st.version, "rebuilt": True}
    if row and row.get("handle"):
        new["handle"] = row["handle"]
    if row == new:
        return False
    table[jid] = new
    if st.state in ACTIVE:
        out.requeued.append(jid)
    return True
