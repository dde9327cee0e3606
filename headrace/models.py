"""Offline predictions with a published model version, through the scorer's own decode and
scoring core: ``headrace.models.load("intents:3").predict([{"text": "hello"}])`` gives what the
stream would give for the same records (``headrace.scorers.offline``)."""

from __future__ import annotations

from pathlib import Path

from headrace.core.settings import load_settings
from headrace.scorers.offline import OfflineModel, Output, Record
from headrace.scorers.offline import load as _load

__all__ = ["OfflineModel", "Output", "Record", "load"]


def load(ref: str, *, dfs_root: Path | None = None, device: str = "cpu",
         top_k: int | None = None) -> OfflineModel:
    """``NAME[:VERSION]`` (or ``NAME@ALIAS``) from the DFS (default: ``HEADRACE_DFS_ROOT``)."""
    root = dfs_root if dfs_root is not None else load_settings().dfs_root
    return _load(root, ref, device=device, top_k=top_k)
