"""Hot swap: watch for a new version of the served alias, load it aside, swap between batches.

Triggers: a ``ModelPublished`` event for our model and alias on ``events.models`` (immediate),
and re-reading the alias pointer every ``poll_s`` (fallback for a missed event). A rollback is
just the alias moving back: it is swapped in the same way. The new version is resolved (every
file's sha256 verified), loaded and warmed on this thread while the old one keeps serving; a
version that fails is refused, counted, and not retried until the pointer changes again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from headrace.core.errors import FatalError, HeadraceError, PermanentError, RetriableError
from headrace.scorers.engine.fallback import fallback_message, load_previous
from headrace.scorers.engine.metrics import ScorerMetrics
from headrace.scorers.engine.models import LoadedModel, ModelHolder, Sizing, load_model, load_ref
from headrace.scorers.engine.stream_io import ModelEventsListener
from headrace.store.versions import AliasPointer, IntegrityError, VersionNotFound, read_alias

log = logging.getLogger(__name__)


class ModelWatcher:
    def __init__(
        self,
        *,
        root: Path,
        name: str,
        alias: str,
        device: str,
        max_batch: int,
        holder: ModelHolder,
        metrics: ScorerMetrics,
        events: ModelEventsListener | None,
        poll_s: float,
        sizes: Sizing | None = None,
        on_phase: Callable[[str], None] | None = None,
    ) -> None:
        self.root, self.name, self.alias = root, name, alias
        self.device, self.max_batch = device, max_batch
        self.holder, self.metrics, self.events, self.poll_s = holder, metrics, events, poll_s
        self.sizes = sizes
        self.on_phase = on_phase or (lambda phase: None)  # loading / warming, for readiness
        self._refused: tuple[int, str] | None = None
        # Serving the alias's previous version because its own is refused: that one is
        # retried every poll (its files may be repaired in place).
        self._fallback = False
        self._thread: threading.Thread | None = None

    # -- one check -----------------------------------------------------------------------
    def check(self) -> LoadedModel | None:
        """Load and swap in the alias's version if it differs from the one serving."""
        try:
            pointer = read_alias(self.root, self.name, self.alias)
        except (RetriableError, OSError) as exc:
            self._failed("unreadable", exc)
            return None
        if pointer is None:
            return None
        target = (pointer.version, pointer.manifest_sha256)
        cur = self.holder.current
        if cur is not None and (cur.version, cur.manifest_sha256) == target:
            self._fallback = False  # e.g. rolled back to the version the fallback serves
            return None
        if target == self._refused and not self._fallback:
            return None
        try:
            model = load_model(root=self.root, name=self.name, alias=self.alias,
                               device=self.device, max_batch=self.max_batch, sizes=self.sizes,
                               on_phase=self.on_phase)
        except IntegrityError as exc:
            self._refused = target
            self._failed("integrity", exc)
            return self._fall_back(pointer, exc)
        except VersionNotFound as exc:
            self._failed("not-found", exc)
            return None
        except PermanentError as exc:
            self._refused = target
            self._failed("load", exc)
            return self._fall_back(pointer, exc)
        except (RetriableError, OSError) as exc:
            self._failed("unreadable", exc)
            return None
        except FatalError as exc:  # e.g. the runtime cannot take this version (no export)
            if self.holder.current is None:
                raise  # nothing serves: the process cannot go on
            self._refused = target  # a swap: refused, the serving version keeps serving
            self._failed("load", exc)
            return None
        self._fallback = False
        return self._serve(model)

    def _fall_back(self, pointer: AliasPointer, exc: Exception) -> LoadedModel | None:
        """Nothing serves yet and the alias's version is refused: serve its most recent
        intact previous version, and say which is corrupt and how to fix it."""
        if self.holder.current is not None:
            return None  # the version serving now keeps serving
        model = load_previous(self.root, self.name, self.alias, pointer, lambda ref: load_ref(
            root=self.root, ref=ref, device=self.device, max_batch=self.max_batch,
            sizes=self.sizes))
        if model is None:
            return None
        log.warning("%s", fallback_message(self.name, self.alias, pointer, model.version,
                                           str(exc)))
        self._fallback = True
        return self._serve(model)

    def _serve(self, model: LoadedModel) -> LoadedModel:
        old = self.holder.swap(model)
        self.metrics.model_version.labels(model=self.name).set(model.version)
        self.metrics.model_swaps.labels(model=self.name).inc()
        log.info("serving %s (was %s)", model.ref, old.ref if old else "none")
        return model

    def _failed(self, reason: str, exc: Exception) -> None:
        self.metrics.model_load_failures.labels(model=self.name, reason=reason).inc()
        cur = self.holder.current
        log.error("model %s@%s refused (%s): %s; still serving %s", self.name, self.alias, reason,
                  exc, cur.ref if cur else "nothing")

    # -- first load ----------------------------------------------------------------------
    def wait_first(self, stop: threading.Event) -> LoadedModel | None:
        """Block until a first version is loaded (retrying with backoff) or ``stop`` is set."""
        delay = 0.2
        while not stop.is_set():
            self.check()
            if self.holder.current is not None:
                return self.holder.current
            self.on_phase(f"waiting for a loadable {self.alias} version of model {self.name}")
            log.warning("no loadable %s version of model %s yet; retrying in %.1fs",
                        self.alias, self.name, delay)
            stop.wait(delay)
            delay = min(delay * 2, 5.0)
            self._refused = None  # the first load keeps trying: files may be fixed in place
        return None

    # -- background ----------------------------------------------------------------------
    def start(self, stop: threading.Event) -> None:
        self._thread = threading.Thread(target=self._loop, args=(stop,), name="model-watcher",
                                        daemon=True)
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _loop(self, stop: threading.Event) -> None:
        next_poll = time.monotonic() + self.poll_s
        events_ok = self.events is not None
        while not stop.is_set():
            wake = False
            if events_ok and self.events is not None:
                try:
                    for ev in self.events.poll(min(0.5, max(0.0, next_poll - time.monotonic()))):
                        if ev.model_name == self.name and ev.alias == self.alias:
                            log.info("ModelPublished %s:%s (%s)", ev.model_name, ev.version,
                                     ev.action)
                            wake = True
                except HeadraceError as exc:
                    log.warning("model events unavailable (%s); polling the alias only", exc)
                    events_ok = False
            else:
                stop.wait(min(0.5, max(0.0, next_poll - time.monotonic())))
            if wake or time.monotonic() >= next_poll:
                if wake:
                    self._refused = None  # an explicit event: give a refused pointer one more try
                self.check()
                next_poll = time.monotonic() + self.poll_s
        if self.events is not None:
            self.events.close()

