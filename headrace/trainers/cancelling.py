"""Who ends a job, its publish or an operator's cancel, decided once on the DFS.

``jobs/<id>/end.claim`` is created exclusively by whichever comes first: the job's chief just
before it publishes its model (``publish``), or the control plane acting on a
``CancelRequested`` (``cancel``, with who asked and why). The other gives way:

* a job that finds the cancel's claim publishes nothing and stops (``JobCancelled``);
* a cancel that finds the publish's claim is refused: the job is publishing, and it ends
  succeeded (or failed) as it would have.

A retry of a job whose chief claimed the publish publishes on (the claim is its own), and a
control plane restarted after claiming a cancel finishes it (``ControlPlane.on_ready``), so a
cancel racing a finish, a retry or a restart leaves exactly one final state.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from headrace.core.errors import PermanentError
from headrace.store.dfs import fsync_dir, job_dir

CLAIM = "end.claim"
PUBLISH = "publish"
CANCEL = "cancel"


class JobCancelled(PermanentError):
    """An operator cancelled the job before it published: it publishes nothing."""


@dataclass(frozen=True)
class Claim:
    by: str  # PUBLISH or CANCEL
    requested_by: str | None = None  # a cancel's: who asked
    reason: str | None = None  # and why
    event_id: str | None = None  # the CancelRequested's

    def line(self) -> str:
        """``cancelled by alice: wrong dataset`` (a cancel's words for events and status)."""
        why = f": {self.reason}" if self.reason else ""
        return f"cancelled by {self.requested_by or 'an operator'}{why}"


def claim(root: Path, job_id: str, mine: Claim) -> Claim:
    """Claim the job's end for ``mine``; the claim that holds (``mine``, or the one first)."""
    path = job_dir(root, job_id) / CLAIM
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        held = read_claim(root, job_id)
        # Empty: its writer died between create and write. Never taken over (it may be a job
        # about to publish, or its retry): it counts as the publish's.
        return held if held is not None else Claim(PUBLISH)
    try:
        os.write(fd, json.dumps(asdict(mine)).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)
    return mine


def read_claim(root: Path, job_id: str) -> Claim | None:
    """The job's end claim, or None (none yet, or not readable yet)."""
    try:
        data = json.loads((job_dir(root, job_id) / CLAIM).read_bytes() or b"null")
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("by") not in (PUBLISH, CANCEL):
        return None
    return Claim(by=str(data["by"]), requested_by=data.get("requested_by"),
                 reason=data.get("reason"), event_id=data.get("event_id"))
