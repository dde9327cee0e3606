"""The dashboard's studies panel: every ``headrace tune`` study on the DFS, its trials and its
best trial (read from the study's journal; Optuna is imported only when a study exists)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from headrace.trainers.tuning import TrialRow

MAX_TRIALS = 200  # per study in the view: the newest ones


def studies(root: Path) -> dict[str, Any]:
    base = root / "studies"
    names = sorted(d.name for d in base.iterdir() if (d / "study.json").is_file()) \
        if base.is_dir() else []
    if not names:
        return {"studies": []}
    try:
        from headrace.trainers.tuning import show_study
    except ModuleNotFoundError as exc:
        return {"studies": [], "error": f"studies need Optuna ({exc.name} is missing)"}
    out: list[dict[str, Any]] = []
    for name in names:
        try:
            result = show_study(root=root, name=name)
        except Exception as exc:  # one unreadable study must not hide the others
            out.append({"name": name, "error": str(exc).splitlines()[0][:300]})
            continue
        c = result.config
        counts: dict[str, int] = {}
        for t in result.trials:
            counts[t.state] = counts.get(t.state, 0) + 1
        out.append({
            "name": name, "model_name": c.model_name, "framework": c.framework.value,
            "model": c.model, "dataset": c.dataset_uri, "metric": c.metric,
            "direction": c.direction, "pruner": c.pruner, "space": c.space,
            "states": counts, "best": _trial(result.best) if result.best else None,
            "trials": [_trial(t) for t in result.trials[-MAX_TRIALS:]]})
    return {"studies": out}


def _trial(t: TrialRow) -> dict[str, Any]:
    return {"number": t.number, "state": t.state, "value": t.value, "params": t.params,
            "job_id": t.job_id, "version": t.version, "promoted": t.promoted}
