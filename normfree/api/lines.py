"""Fidelity lines (a board's or a study's one-line fidelity summary), computed beside the reads.

Why: a leaderboard and a study page show a fidelity line, a report over every finished trial
of the proxy (or study). Computed inside the board's build, it ran once per write (a finished
trial moves the board) and, in a process that had not yet resolved the arms' names (sympy:
a shift_h call is a few tenths of a second, a board has hundreds), took the first board after a
start 10-25 s and every later one tens of ms under a writer (issue 27: first request < 1 s,
live reads p99 < 50 ms). So a line is computed by one background thread, once per version of
what it shows; in a server, that thread only waits for the server's background worker process
(``api.offload.BackgroundWorker``), which computes it, so that its pure-Python report does not
hold the GIL the readers need. A build shows the line of the *current* version if it is done within
``settings.fidelity_line_wait_s`` (a board's or study's first line) or
``fidelity_line_rewait_s`` (none by default: once an older line is done), else the latest line
done (its ``cells`` say what it covers), and the board is built again when the current line is
done (a target's :meth:`FidelityLines.stamp` is part of its reads' keys, and the
lines' :attr:`FidelityLines.epoch` of the fast lane's stamp).

A target's lines are spaced: the next starts no sooner than :data:`SPACING` times the last
one's cost after it (at most :data:`MAX_SPACING_S`), so a line lags a stream of writes by a
few commits (its ``cells`` say what it covers) while the thread leaves the GIL to the reads.

A line that fails raises its exception to the build that waits for it (the board names
``fidelity`` as unreadable); a build that does not wait shows the previous line.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

log = logging.getLogger(__name__)

Target = tuple[str, Any]  # ("proxy", name) or ("study", id)
# A target's next line starts no sooner than this many times its last line's cost after it:
# a line over 10k trials is a few hundred ms of CPU, and a writer moves it five times a second.
SPACING = 9.0
# ... and no later than this after it. A line's cost is its wall time, which for a server's
# first line includes waiting for its background worker's start (11 s at 10k trials): spaced
# 9x, that target's next line, asked for a second later, waited 100 s, and its reads' keys
# moved when it finally landed, long after the warm-up had built them (issue 27).
MAX_SPACING_S = 5.0
# At the process's exit a line being computed is waited for this long. Why: the thread is a
# daemon, and a daemon thread still inside scipy's native code when the interpreter finalizes
# aborted the process ("FATAL: exception not rethrown", exit 134): `normfree export
# leaderboard` did, each time, after writing its file.
EXIT_WAIT_S = 10.0


class FidelityLines:
    """Lines by target, the latest version of each, computed one at a time on one thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: dict[Target, tuple[Hashable, Any]] = {}
        self._wanted: dict[Target, tuple[Hashable, Callable[[], Any], Future[Any]]] = {}
        self._order: list[Target] = []
        self._running: dict[Target, tuple[Hashable, Future[Any]]] = {}
        self._thread: threading.Thread | None = None
        self._wake = threading.Condition(self._lock)
        self._stamps: dict[Target, int] = {}
        self._shown_old: set[tuple[Target, Hashable]] = set()
        self._not_before: dict[Target, float] = {}
        self._spacing: dict[Target, float] = {}  # as the last caller of :meth:`line` asked
        self._waited: set[Target] = set()  # targets whose first line a build waited for
        self._settled = False  # the first line's long-lived leftovers frozen (_settle)
        self.epoch = 0  # every line done (the fast lane's stamp)
        # A read builder process (``api.builder``) computes no line: it shows the lines its
        # server sent with the build (:meth:`borrow`).
        self._borrowed = False
        self._closing = False  # the process exits: no line starts any more (:meth:`close`)

    def line(
        self,
        target: Target,
        version: Hashable,
        compute: Callable[[], Any],
        wait_s: float,
        rewait_s: float | None = None,
        spacing: float = SPACING,
    ) -> Any:
        """``target``'s line at ``version``: computed (or being computed) in the background;
        waited for at most ``wait_s`` (``rewait_s`` when an older line is done: by default the
        same), else the latest line done (None if there is none)."""
        with self._lock:
            if self._borrowed or self._closing:  # a closed one computes nothing any more
                found = self._done.get(target)
                return None if found is None else found[1]
            self._spacing[target] = spacing
            done = self._done.get(target)
            if rewait_s is not None and (done is not None or target in self._waited):
                # a target's first line is waited for once: while it is still being computed
                # (a server's first seconds, its background worker busy with the catalog and
                # the analyses), every later build of a new version shows none at once instead
                # of waiting again (each commit of a writer moved the board: 0.25 s per build)
                wait_s = rewait_s
            self._waited.add(target)
            if done is not None and done[0] == version:
                return done[1]
            wanted = self._wanted.get(target)
            running = self._running.get(target)
            if wanted is not None and wanted[0] == version:
                future = wanted[2]
            elif running is not None and running[0] == version:
                future = running[1]
            else:
                future = Future()
                if wanted is not None:  # an older version not started yet: this one replaces it
                    wanted[2].cancel()
                else:
                    self._order.append(target)
                self._wanted[target] = (version, compute, future)
                self._ensure_thread()
                self._wake.notify()
        try:
            if wait_s > 0:
                return future.result(timeout=wait_s)
        except FutureTimeout:
            pass
        except Exception:
            if not future.cancelled():  # else: replaced by a newer version while waiting
                raise
        return self._instead(target, version)

    def stamp(self, target: Target) -> int:
        """How many lines of ``target`` were done after a build had shown an older one: a part
        of the keys of the reads that show it, so that such a line moves only those reads."""
        return self._stamps.get(target, 0)

    def _instead(self, target: Target, version: Hashable) -> Any:
        """The line shown while ``version``'s is not done: the latest done. Noted, so that
        the line's end moves ``target``'s stamp (what was shown must be built again); a line
        that every build waited for moves nothing (they show it already)."""
        with self._lock:
            done = self._done.get(target)
            if done is not None and done[0] == version:  # done since the wait ended
                return done[1]
            self._shown_old.add((target, version))
        return done[1] if done is not None else None

    def _ensure_thread(self) -> None:
        if self._closing:
            return
        if self._thread is None or not self._thread.is_alive():
            if self._thread is None:
                atexit.register(self.close)
            self._thread = threading.Thread(target=self._loop, name="normfree-lines", daemon=True)
            self._thread.start()

    def close(self, wait_s: float = EXIT_WAIT_S) -> None:
        """Start no more lines and wait (at most ``wait_s``) for the one being computed: run
        at the process's exit, before the interpreter's finalization (see
        :data:`EXIT_WAIT_S`). Lines still wanted are cancelled (their waiters see none)."""
        with self._lock:
            self._closing = True
            for _version, _compute, future in self._wanted.values():
                future.cancel()
            self._wanted.clear()
            self._order.clear()
            self._wake.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(wait_s)

    def _next(self) -> Target | None:
        """The next target whose spacing has passed (waits for one), None once closing;
        under the lock."""
        while True:
            if self._closing:
                return None
            now = time.monotonic()
            ready = [t for t in self._order if self._not_before.get(t, 0.0) <= now]
            if ready:
                self._order.remove(ready[0])
                return ready[0]
            soonest = min((self._not_before.get(t, 0.0) for t in self._order), default=None)
            self._wake.wait(None if soonest is None else max(0.0, soonest - now))

    def _loop(self) -> None:
        while True:
            with self._lock:
                target = self._next()
                if target is None:
                    return
                version, compute, future = self._wanted.pop(target)
                if not future.set_running_or_notify_cancel():
                    continue
                self._running[target] = (version, future)
            started = time.monotonic()
            try:
                value = compute()
            except BaseException as exc:  # raised to the build that waits, logged by it
                with self._lock:
                    self._running.pop(target, None)
                future.set_exception(exc)
                continue
            with self._lock:
                # a target's next line waits ``spacing`` times this one's cost: under a stream
                # of writes the thread (and the GIL it holds) stays mostly free for the reads
                cost = time.monotonic() - started
                spacing = self._spacing.get(target, SPACING)
                self._not_before[target] = time.monotonic() + min(spacing * cost, MAX_SPACING_S)
                self._running.pop(target, None)
                self._done[target] = (version, value)
                # an older line shown for this version, or for one it replaced
                shown = {k for k in self._shown_old if k[0] == target}
                if shown:
                    self._shown_old -= shown
                    self._stamps[target] = self._stamps.get(target, 0) + 1
                    self.epoch += 1
            future.set_result(value)
            if not self._settled:
                _settle()
                self._settled = True

    def busy(self) -> bool:
        """Whether a line is wanted or being computed (each one done may move reads' keys)."""
        with self._lock:
            return bool(self._wanted or self._running)

    def clear(self) -> None:
        with self._lock:
            self._done.clear()
            self._waited.clear()

    def snapshot(self) -> tuple[tuple[Target, Hashable], dict[Target, tuple[Hashable, Any]]]:
        """(what identifies the lines done now, the lines done): for :meth:`borrow`."""
        with self._lock:
            done = dict(self._done)
        return tuple((t, v[0]) for t, v in done.items()), done

    def borrow(self, done: dict[Target, tuple[Hashable, Any]]) -> None:
        """Show ``done`` (another process's lines: a read builder's server) and compute none;
        a target whose line changed moves its stamp, as a line done here would."""
        with self._lock:
            self._borrowed = True
            for target, line in done.items():
                old = self._done.get(target)
                if old is None or old[0] != line[0]:
                    self._done[target] = line
                    self._stamps[target] = self._stamps.get(target, 0) + 1
                    self.epoch += 1


def _settle() -> None:
    """After this process's first line: freeze what it left for the rest of the process (the
    names it resolved, sympy's caches: ~25k objects), as the warm-up froze the catalog, so that
    full collections do not walk them (:func:`preload`). A no-op outside a server."""
    from normfree.api.services import freeze_long_lived

    freeze_long_lived()


LINES = FidelityLines()


def preload() -> None:
    """Import what a line computes with (``workers.fidelity`` and scipy.stats: ~180 modules,
    ~40k objects that live as long as the process)."""
    import scipy.stats  # noqa: F401

    from normfree.workers.fidelity import fidelity_report  # noqa: F401


_PRELOADED = threading.Event()


def preload_once() -> None:
    """:func:`preload`, then freeze the heap (``services.freeze_long_lived``: a no-op outside
    a server), once per process: called before the first line computed in this process.

    Why: imported by a line after the server's freeze, those objects stayed in the garbage
    collector's reach, and every full collection walked them with the GIL held: 55-150 ms on
    2 shared cores, during which no request was answered (the worst ``/api/health`` probes of
    bench_hostile, bench/results/hostile-quick.md). Not at every start: a server's lines are
    computed by its background worker, and the import held the GIL for a second while the
    start's first readers waited (``app._warm_up``)."""
    if _PRELOADED.is_set():
        return
    from normfree.api.services import freeze_long_lived

    preload()
    freeze_long_lived()
    _PRELOADED.set()


def proxy_target(state: Any, proxy: str) -> Target:
    return ("proxy", (state.db.url, proxy))


def study_target(state: Any, study_id: int) -> Target:
    return ("study", (state.db.url, study_id))


def proxy_line(state: Any, proxy: str) -> Any:
    """The proxy board's fidelity line (``api.fidelity.summary``), by the proxy's version."""
    from normfree.api import fidelity
    from normfree.storage import reads
    from normfree.storage.references import READ_SCOPE

    with state.db.read() as conn:
        version = tuple(sorted(reads.versions(conn, [f"proxy:{proxy}", READ_SCOPE]).items()))
    return LINES.line(
        proxy_target(state, proxy),
        version,
        lambda: fidelity.summary_anywhere(state, proxy=proxy),
        state.settings.fidelity_line_wait_s,
        state.settings.fidelity_line_rewait_s,
        state.settings.fidelity_line_spacing,
    )


def study_line(state: Any, study_id: int) -> Any:
    """A study's fidelity line, by the study's stamp (status, update time, counts)."""
    from normfree.api import fidelity
    from normfree.storage import reads
    from normfree.storage.references import READ_SCOPE

    with state.db.read() as conn:
        version = (
            reads.study_stamp(conn, study_id),
            tuple(sorted(reads.versions(conn, [READ_SCOPE]).items())),
        )
    return LINES.line(
        study_target(state, study_id),
        version,
        lambda: fidelity.summary_anywhere(state, study_id=study_id),
        state.settings.fidelity_line_wait_s,
        state.settings.fidelity_line_rewait_s,
        state.settings.fidelity_line_spacing,
    )
