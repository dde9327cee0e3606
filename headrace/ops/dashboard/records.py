"""What the DFS says about jobs and models, shaped for the page: job directories (status,
request, training curves, the gate's outcome), the model store's versions (each with its
outcome: promoted, kept or refused with the gate's reasons) and one version in detail.

Every reader is defensive: a missing or malformed file shows as empty or as an error line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from headrace.core.errors import HeadraceError
from headrace.core.naming import check_name
from headrace.ops.dashboard.history import curves, read_history
from headrace.store import versions
from headrace.store.dfs import jobs_dir
from headrace.store.outcomes import Outcome, job_outcome, of_job, version_outcome

MAX_LOG_LINES = 500


def dfs_jobs(root: Path, *, limit: int) -> dict[str, dict[str, Any]]:
    """job id -> what its DFS directory says (status.json, request.json), newest first."""
    base = jobs_dir(root)
    if not base.is_dir():
        return {}
    dirs = sorted((d for d in base.iterdir() if d.is_dir() and not d.name.startswith(".")),
                  key=lambda d: d.stat().st_mtime, reverse=True)[:limit]
    out: dict[str, dict[str, Any]] = {}
    for d in dirs:
        info: dict[str, Any] = {"job_id": d.name}
        for name in ("status.json", "request.json"):
            data = _json(d / name)
            if isinstance(data, dict):
                info[name.removesuffix(".json")] = data
        out[d.name] = info
    return out


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def job_status(root: Path, job_id: str | None) -> dict[str, Any] | None:
    if not job_id:
        return None
    try:
        data = _json(jobs_dir(root) / check_name(job_id, what="job id") / "status.json")
    except HeadraceError:
        return None
    return data if isinstance(data, dict) else None


def outcome_of_job(root: Path, status: dict[str, Any]) -> Outcome | None:
    """The job's outcome: its version's once it stored one (the same words as `jobs list`,
    `models list` and `train --wait`; headrace/store/outcomes.py)."""
    return of_job(root, status)


def dfs_job_row(root: Path, info: dict[str, Any]) -> dict[str, Any]:
    """A job known from its directory only (its events expired, or no broker)."""
    js = info.get("status") or {}
    req = info.get("request") or {}
    state = js.get("state") or "unknown"
    total = (req.get("spec") or {}).get("epochs")
    epoch = js.get("epoch")
    progress = 1.0 if state == "succeeded" else None
    if state == "running" and isinstance(epoch, int) and isinstance(total, int) and total > 0:
        progress = min(1.0, epoch / total)
    return {"job_id": info["job_id"], "status": state, "source": "dfs",
            "model_name": js.get("model_name") or req.get("model_name"),
            "progress": progress, "attempt": js.get("attempts"),
            "metrics": js.get("metrics") or {}, "last_ts": js.get("updated_at"),
            "reason": js.get("reason")}


def enrich_job(root: Path, row: dict[str, Any], info: dict[str, Any] | None) -> dict[str, Any]:
    """Add what only the DFS knows: the gate's outcome, the version, the curves' summary."""
    js = (info or {}).get("status")
    if isinstance(js, dict):
        found = outcome_of_job(root, js)
        if found is not None:
            row["outcome"] = found.to_json()
        row["version"] = js.get("version")
        if row.get("status") in (None, "unknown", "queued") and js.get("state"):
            row["status"] = js["state"]
    hist = read_history(jobs_dir(root) / row["job_id"]) if info is not None else None
    if hist and "error" not in hist:
        row["training"] = {k: hist.get(k) for k in ("epochs_run", "best_epoch",
                                                     "stopped_because")}
        row["training"]["epochs"] = len(hist["epochs"])
    return row


def job_detail(root: Path, job_id: str) -> dict[str, Any]:
    """Curves and the outcome of one job, for its detail pane."""
    d = jobs_dir(root) / check_name(job_id, what="job id")
    js = _json(d / "status.json")
    found = outcome_of_job(root, js) if isinstance(js, dict) else None
    return {"history": read_history(d), "outcome": found.to_json() if found else None}


def job_log_file(root: Path, job_id: str, *, lines: int) -> list[str]:
    """The tail of a job's log file on the DFS, if it wrote one."""
    d = jobs_dir(root) / check_name(job_id, what="job id")
    for name in ("job.log", "log.txt", "train.log"):
        f = d / name
        if f.is_file():
            with open(f, "rb") as fh:
                fh.seek(max(0, f.stat().st_size - 256 * 1024))
                return fh.read().decode("utf-8", "replace").splitlines()[-lines:]
    return []


# --- models -----------------------------------------------------------------------------------


def _production(root: Path, name: str) -> tuple[int | None, list[versions.AliasPointer]]:
    """The production version now, and the production alias's history."""
    try:
        pointer = versions.read_alias(root, name)
        history = versions.alias_history(root, name)
    except (HeadraceError, ValueError, TypeError):
        return None, []
    return (pointer.version if pointer else None), history


def models(root: Path, jobs: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every model with its stored versions (newest last), each with the gate's outcome; a
    job the gate refused without storing a version is listed as a version ``null``."""
    jobs = jobs if jobs is not None else dfs_jobs(root, limit=500)
    names = set(versions.list_models(root))
    unstored: dict[str, list[dict[str, Any]]] = {}
    for info in jobs.values():
        js = info.get("status") or {}
        if js.get("result") == "refused" and not js.get("version") and js.get("model_name"):
            unstored.setdefault(js["model_name"], []).append(js)
            names.add(js["model_name"])
    out = []
    for name in sorted(names):
        prod, ever = _production(root, name)
        vs: list[dict[str, Any]] = []
        for v in _versions(root, name):
            try:
                m, _ = versions.read_manifest(versions.model_dir(root, name) / str(v))
            except HeadraceError as exc:
                vs.append({"version": v, "error": str(exc)})
                continue
            found = version_outcome(gate=m.extra.get("gate"), version=v, history=ever,
                                    job_status=job_status(root, m.job_id))
            vs.append({"version": v, "framework": m.framework.value, "task": m.task.value,
                       "metrics": m.metrics, "created_at": m.created_at.isoformat(),
                       "job_id": m.job_id, "production": prod == v,
                       "outcome": found.to_json() if found else None,
                       "has_confusion_matrix": bool(m.confusion_matrix)})
        for js in unstored.get(name, []):
            found = job_outcome(js)
            vs.append({"version": None, "framework": js.get("framework"), "task": None,
                       "metrics": js.get("metrics") or {}, "created_at": js.get("finished_at")
                       or js.get("updated_at"), "job_id": js.get("job_id"), "production": False,
                       "outcome": found.to_json() if found else None,
                       "has_confusion_matrix": False})
        out.append({"name": name, "production": prod, "versions": vs})
    return out


def _versions(root: Path, name: str) -> list[int]:
    try:
        return versions.list_versions(root, name)
    except HeadraceError:
        return []


def model_version(root: Path, name: str, version: int) -> dict[str, Any]:
    path = versions.model_dir(root, name) / str(version)
    if not path.is_dir():
        raise versions.VersionNotFound(f"model {name} has no version {version}")
    m, digest = versions.read_manifest(path)
    prod, ever = _production(root, name)
    js = job_status(root, m.job_id)
    found = version_outcome(gate=m.extra.get("gate"), version=version, history=ever,
                            job_status=js)
    # Curves: the manifest's own copy (newer versions), else the job's history.json.
    training = curves(m.model_dump().get("training") or m.extra.get("training"))
    if training is None and m.job_id:
        try:
            training = read_history(jobs_dir(root) / check_name(m.job_id, what="job id"))
        except HeadraceError:
            training = None
    return {"name": name, "version": version, "framework": m.framework.value,
            "task": m.task.value, "features": list(m.features), "label": m.label,
            "classes": list(m.classes), "metrics": m.metrics,
            "confusion_matrix": m.confusion_matrix, "created_at": m.created_at.isoformat(),
            "job_id": m.job_id, "dataset": m.dataset.model_dump() if m.dataset else None,
            "manifest_sha256": digest, "production": prod == version,
            "outcome": found.to_json() if found else None, "training": training,
            "history": [p.__dict__ for p in ever][-20:]}
