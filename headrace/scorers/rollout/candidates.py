"""A rollout candidate loaded beside production, like a model swap: resolved (every file's
sha256 verified), loaded and warmed on a background thread while production goes on serving
every record; the role uses it once it is there. A version that cannot load is reported once
(``failure``) and not tried again until another version is wanted (or the rollout ended:
``drop``); a transient failure (the DFS away) is tried again after ``RETRY_S``.

One loader for both rollout roles: the canary's routing role and the shadow tap. ``prepare``
runs in the loading thread before the model loads (the shadow: its topic made and its live
counts read back), so the candidate is there only once everything it needs is."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from headrace.core.errors import PermanentError
from headrace.scorers.engine.models import LoadedModel, Sizing, load_ref

if TYPE_CHECKING:
    from headrace.scorers.engine.taps import TapContext

log = logging.getLogger(__name__)

RETRY_S = 5.0


class CandidateLoader:
    def __init__(self, *, root: Path, device: str, max_batch: int, sizes: Sizing,
                 prepare: Callable[[str, int], None] | None = None) -> None:
        self.root, self.device, self.max_batch, self.sizes = root, device, max_batch, sizes
        self.prepare = prepare
        self._lock = threading.Lock()
        self._wanted: tuple[str, int] | None = None
        self._loaded: LoadedModel | None = None
        self._failure: str | None = None
        self._thread: threading.Thread | None = None
        self._retry_at = 0.0  # after a transient failure

    def want(self, name: str, version: int, *, wait: bool = False) -> LoadedModel | None:
        """The candidate when loaded; starts loading it (in the background unless ``wait``)
        when another version was wanted."""
        with self._lock:
            if self._wanted == (name, version):
                return self._loaded
            if time.monotonic() < self._retry_at:
                return None
            self._wanted, self._loaded, self._failure = (name, version), None, None
            self._thread = threading.Thread(target=self._load, args=(name, version),
                                            name="candidate-loader", daemon=True)
            self._thread.start()
            thread = self._thread
        if wait:
            thread.join()
        with self._lock:
            return self._loaded if self._wanted == (name, version) else None

    def drop(self) -> None:
        """No candidate wanted (the rollout ended): release the loaded one."""
        with self._lock:
            self._wanted, self._loaded, self._failure = None, None, None

    @property
    def loaded(self) -> LoadedModel | None:
        """The candidate loaded now, if any."""
        return self._loaded

    def state(self) -> tuple[str, str] | None:
        """The wanted candidate (``NAME:VERSION``) and where it is: ``loading``, ``loaded`` or
        ``failed``; None when none is wanted."""
        with self._lock:
            if self._wanted is None:
                return None
            ref = f"{self._wanted[0]}:{self._wanted[1]}"
            return ref, ("loaded" if self._loaded is not None else
                         "failed" if self._failure is not None else "loading")

    @property
    def failure(self) -> str | None:
        """Why the wanted version cannot load (a permanent failure), if it cannot."""
        return self._failure

    def _load(self, name: str, version: int) -> None:
        ref = f"{name}:{version}"
        try:
            if self.prepare is not None:
                self.prepare(name, version)
            model = load_ref(root=self.root, ref=ref, device=self.device,
                             max_batch=self.max_batch, sizes=self.sizes)
        except PermanentError as exc:
            log.error("rollout candidate %s refused: %s", ref, exc)
            with self._lock:
                if self._wanted == (name, version):
                    self._failure = f"candidate {ref} does not load: {exc}"
            return
        except Exception as exc:  # the DFS may be back later: retried on the next want()
            log.warning("rollout candidate %s not loaded (%s); trying again", ref, exc)
            with self._lock:
                if self._wanted == (name, version):
                    self._wanted = None
                    self._retry_at = time.monotonic() + RETRY_S
            return
        with self._lock:
            if self._wanted == (name, version):
                self._loaded = model
                log.info("rollout candidate %s loaded", ref)


class CandidateGauge(Collector):
    """``headrace_rollout_candidate{stream,role,candidate,state}``: 1 for the candidate each
    rollout role of this scorer wants and where its loading is, so an operator sees which
    replicas run it (a replica still loading scores production alone)."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.loaders: dict[str, CandidateLoader] = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily("headrace_rollout_candidate",
                              "The rollout candidate a role of this scorer wants, by state "
                              "(loading, loaded, failed).",
                              labels=["stream", "role", "candidate", "state"])
        for role, loader in sorted(self.loaders.items()):
            st = loader.state()
            if st is not None:
                g.add_metric([self.stream, role, *st], 1)
        yield g


def watch_loading(ctx: TapContext, role: str, loader: CandidateLoader) -> None:
    """Put ``loader`` on the scorer's ``headrace_rollout_candidate`` (one gauge, every role)."""
    gauge = ctx.shared.get("candidate_gauge")
    if not isinstance(gauge, CandidateGauge):
        gauge = ctx.shared["candidate_gauge"] = CandidateGauge(ctx.metrics.stream)
        ctx.metrics.registry.register(gauge)
    gauge.loaders[role] = loader
