"""Group and properties of the functions behind leaderboard arms, analysed off the request path.

An arm named by a transform call (``shift_h(erf, 0.25)``) has no stored candidate row: its group and
properties come from ``search_space`` (parse, transform, exact derivative, numeric properties),
50-200 ms of sympy per name, and a property study has hundreds of such names: on the request path
the first leaderboard after a start would take tens of seconds. So one background thread analyses
names as leaderboards meet them (and, at start, every name with finished trials); an unfiltered
leaderboard shows the analyses done so far, and ``epoch`` (part of the leaderboard's cache key)
moves when more are done, so the board refreshes. A leaderboard filtered by group or property waits
for its names instead: a filter must not drop a row whose analysis is pending.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Any

from normfree.storage.analyses import Info

log = logging.getLogger(__name__)

Sink = Callable[[list[tuple[str, Info]]], Any]
_MISSING = object()
# Analyses done before they are stored even while the queue is still long (a crash loses at
# most this many); the rest are stored when the queue runs empty.
FLUSH_EVERY = 32


class Enricher:
    """Analyses function names once per process, in a background thread or on demand."""

    def __init__(
        self, analyse: Callable[[str], Info], on_idle: Callable[[], None] | None = None
    ) -> None:
        self._analyse = analyse
        self._on_idle = on_idle  # called when the queue runs empty after a batch
        self._known: dict[str, Info] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[str] = queue.Queue()
        self._queued: set[str] = set()
        self._thread: threading.Thread | None = None
        self._sink: Sink | None = None  # where analyses done here are kept (``attach``)
        self._unsaved: list[tuple[str, Info]] = []
        self._borrowed = False
        self.epoch = 0

    def attach(self, stored: Iterable[tuple[str, Info]], sink: Sink) -> None:
        """Adopt the analyses a store kept (``stored``) and keep every later one there
        (``sink`` takes a list of them). A process that borrows its analyses stores nothing."""
        if self._borrowed:
            return
        self.adopt(stored)
        with self._lock:
            self._sink = sink

    def borrow(self) -> None:
        """Analyse nothing here: names are known only as another process sends them
        (``adopt``; a read builder, ``api.builder``), and nothing is stored from here, where an
        unknown name would read as "not a catalog function"."""
        with self._lock:
            self._borrowed = True
            self._analyse = lambda _name: None
            self._sink = None
            self._unsaved.clear()

    def flush(self) -> int:
        """Store the analyses done here since the last flush; how many. A store that fails
        loses nothing shown (the analyses stay known here); they are analysed again after the
        next start."""
        with self._lock:
            sink, items = self._sink, self._unsaved
            self._unsaved = []
        if sink is None or not items:
            return 0
        try:
            sink(items)
        except Exception:
            log.warning("could not store %d function analyses", len(items), exc_info=True)
            return 0
        return len(items)

    def peek(self, name: str) -> Any:
        """The analysis if done (None: not a catalog function), else ``MISSING``."""
        return self._known.get(name, _MISSING)

    def get(self, name: str) -> Info:
        """The analysis, computed now if it is not known yet."""
        hit = self._known.get(name, _MISSING)
        if hit is not _MISSING:
            return hit  # type: ignore[return-value]
        return self._store(name, self._safe(name))

    def want(self, names: Iterable[str]) -> int:
        """Queue the names not analysed yet (one daemon thread works through them); returns how
        many are pending."""
        with self._lock:
            new = [n for n in names if n not in self._known and n not in self._queued]
            self._queued.update(new)
            if new and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(
                    target=self._loop, name="normfree-enrich", daemon=True
                )
                self._thread.start()
            pending = len(self._queued)
        for n in new:
            self._queue.put(n)
        return pending

    def known_after(self, count: int) -> list[tuple[str, Info]]:
        """The analyses done after the first ``count`` (in the order they were done): what a
        read builder process (``api.builder``) has not been sent yet."""
        with self._lock:
            items = list(self._known.items())
        return items[count:]

    def adopt(self, items: Iterable[tuple[str, Info]]) -> None:
        """Take analyses done by another process (a read builder's server) as done here."""
        with self._lock:
            for name, info in items:
                if self._known.get(name, _MISSING) != info:
                    self._known[name] = info
                    self.epoch += 1
                self._queued.discard(name)

    def pending(self) -> int:
        with self._lock:
            return len(self._queued)

    def _safe(self, name: str) -> Info:
        try:
            return self._analyse(name)
        except Exception:  # an odd name is "not a catalog function", never a failed request
            log.warning("could not analyse %r", name[:100], exc_info=True)
            return None

    def _store(self, name: str, info: Info) -> Info:
        with self._lock:
            if name not in self._known:
                self._known[name] = info
                self.epoch += 1
                if self._sink is not None:
                    self._unsaved.append((name, info))
            self._queued.discard(name)
        return info

    def _loop(self) -> None:
        while True:
            if self._queue.empty():
                self.flush()
                if self._on_idle is not None:
                    self._on_idle()
            name = self._queue.get()
            if name not in self._known:
                self._store(name, self._safe(name))
                if len(self._unsaved) >= FLUSH_EVERY:
                    self.flush()
            else:
                with self._lock:
                    self._queued.discard(name)


MISSING = _MISSING
