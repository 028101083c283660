"""The builder process: a server's rebuilds of reads under a stream of writes, out of its GIL.

Why: with 10k finished trials and a study finishing five trials a second, every commit moves
the leaderboard, the study and their pages, and their rebuilds (ranking, reliability, the
study's cells, two template renders) took about half of the serving process's GIL. The event
loop, which gives the GIL up at every socket and SQLite call, waited for it to come back each
time, so 32 readers' p99 was hundreds of ms while nothing they read was slow in itself
(bench/results/live_reads.md). In a second process the rebuilds take a core of their own and
the serving process only receives bytes (a pipe read, no GIL held while it waits).

What runs there: the same app (``create_app`` over the server's settings, without studies,
prescreens or migrations), asked for the read's own path through an in-process client, so a
body built there is exactly what the route would answer here; its own read cache keeps the
parts that two reads share (a board's rows serve the API and the page). Only *hot* families go
there (``api.cache``: a version changed within ``read_stale_window_s``, where readers already
get the previous version while the next builds); a quiet read, a read driven by this process
(``replay=False``) and every read before the builder is ready build here as before.

What this process knows that the database does not (the function analyses done, the fidelity
lines, the catalog's rows: seconds of sympy and reports over every trial, computed by its
background worker) is sent along, not computed again there: the catalog at the start, with
each build the analyses done since the last and the lines when they changed. The builder
computes none of them (it would take the core its builds need for tens of seconds after each
start). What it may still lack is what changes between a send and the build (a prescreen, an
importance refresh), so an answer built there serves only while its family stays hot: once
the stream of writes stops, the cache drops it and the next reader builds the family here
(``ResponseCache`` keeps that rule, and moves the fast lane's stamp so it is not replayed).

The process starts :data:`START_AFTER_S` after the server's warm-up (so that the first requests
do not share two cores with the builder's start), exits with the server, and is replaced if
it dies or a build exceeds :data:`BUILD_SECONDS`; a build it cannot give is built here.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import logging
import os
import pickle
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

log = logging.getLogger(__name__)

# A server starts its builder this long after its warm-up: the builder's start is ~3.5 s of a
# core (torch, the app, the templates, the home page's parts), which on two cores doubled the
# readers' latency in a server's first seconds (the first page loads, target < 1 s; measured
# with `bench_live_reads.py --quick`, whose window is a start's first 5 s); a stream of writes
# meanwhile is built in the server, as without a builder.
START_AFTER_S = 10.0
# A build slower than this (wall clock) is abandoned: the builder is killed and started again,
# and the read is built in the serving process.
BUILD_SECONDS = 30.0
# How long the builder may take to start (imports and the app: seconds).
START_SECONDS = 120.0
# The builder's niceness where the host allows it (elsewhere it stays at the server's): every
# reader of a hot read waits on its builds for a fresh answer. At 10k trials under a writer,
# -5 left answers as current as without a builder (48-55% current, at most 5-7 commits behind)
# where 0 let them fall further behind (36-44%, 7-14) for the same readers' latency, and +5
# starved it (no answer current); bench/results/live_reads.md.
NICENESS = -5
# Smaller bodies are not gzipped there (``api.cache.GZIP_MIN_BYTES``).
_GZIP_MIN_BYTES = 1400


def _builder_main(conn: Connection, settings: dict[str, Any], catalog: Any) -> None:
    """The builder process: the app over ``settings``, then one GET per request until the pipe
    closes. A request is ``(target, analyses, lines)`` (what its server knows, see above);
    the answer ``(status, media type, body, gzipped body or None)``."""
    import signal

    from normfree.api.offload import exit_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server's Ctrl-C is the server's
    exit_with_parent()
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    from starlette.testclient import TestClient

    from normfree.api import services
    from normfree.api.app import _preload_reads, create_app, warm_studies
    from normfree.api.lines import LINES
    from normfree.api.services import candidates
    from normfree.settings import Settings

    # computed by the server, never here (a name it has not analysed yet shows as it does there)
    if catalog is not None:
        candidates._CATALOG = catalog
    services.ENRICHER.borrow()
    LINES.borrow({})

    # Reads here are asked by the serving process, which has already checked the reader; a
    # reader of a new version waits for its build (no stale answer from the builder's own
    # cache), and nothing is sent to a builder from here.
    overrides = {"public_reads": True, "read_stale_window_s": 0.0, "read_builder": False}
    app = create_app(
        Settings(**{**settings, **overrides}), run_studies=False, migrate=False, prescreen=False
    )
    # the first-use costs of every read's build (imports, template compilation), which a
    # server takes before its first request (``app._preload_reads``), taken before "ready"
    _preload_reads(app.state.templates)
    with TestClient(app, raise_server_exceptions=False) as client:
        client.get("/")  # and the home page's parts, once
        # and the summaries of the studies updated last, as its server builds them at its
        # start: a study's first build here is the first of a stream of writes to it, and cold
        # (its rows read, its cells' reliability bootstrapped) it took longer than two commits,
        # so that readers got answers two commits behind at a stream's start
        # (bench/results/live_reads.md)
        warm_studies(app.state.services, with_lines=False)
        # the start-up's heap (torch, the app, the templates) out of the collector's scans:
        # unfrozen, each full collection walked it all, 100-300 ms every few seconds under a
        # writer, each a rebuild's delay (answers commits behind; the server does the same,
        # ``services.freeze_long_lived``)
        gc.collect()
        gc.freeze()
        conn.send(("ready",))
        while True:
            try:
                target, analyses, lines = conn.recv()
            except (EOFError, OSError):
                return
            try:
                services.ENRICHER.adopt(analyses)
                if lines is not None:
                    LINES.borrow(lines)
                r = client.get(target, headers={"accept-encoding": "identity"})
                body = r.content
                gz = (
                    gzip.compress(body, compresslevel=5, mtime=0)
                    if len(body) >= _GZIP_MIN_BYTES
                    else None
                )
                conn.send((r.status_code, r.headers.get("content-type", ""), body, gz))
            except Exception as exc:  # the serving process builds it instead
                conn.send((500, "text/plain", f"{type(exc).__name__}: {exc}".encode(), None))


class Builder:
    """The serving process's handle on its builder process: :meth:`build` is called by the read
    cache's one rebuild thread (one build at a time, as the process builds one at a time)."""

    def __init__(self, settings: Any) -> None:
        self._settings = settings.model_dump()
        self._analyses_sent = 0  # of this process's analyses, how many the builder has
        self._lines_sent: Any = None  # what identifies the lines it has
        self._process: Any = None
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._closed = False
        self.built = 0  # bodies it gave (tests and the benchmark read it)
        self.refused = 0  # builds it could not give (built in the serving process instead)

    def start(self, delay: float = 0.0) -> None:
        """Start the process in the background, after ``delay`` seconds."""
        threading.Thread(
            target=self._start_quietly, args=(delay,), name="normfree-builder-start", daemon=True
        ).start()

    def _start_quietly(self, delay: float) -> None:
        time.sleep(delay)
        with self._lock:
            if self._closed or self._ready.is_set():
                return
            try:
                self._start()
            except Exception:
                log.warning("the read builder did not start; reads build here", exc_info=True)

    def _start(self) -> None:
        from normfree.api.offload import _context

        ctx = _context()
        from normfree.api.services import candidates

        parent, child = ctx.Pipe()
        self._analyses_sent, self._lines_sent = 0, None
        proc = ctx.Process(
            target=_builder_main,
            args=(child, self._settings, candidates._CATALOG),
            name="normfree-builder",
            daemon=True,
        )
        proc.start()
        child.close()
        self._process, self._conn = proc, parent
        if not parent.poll(START_SECONDS):
            self._kill()
            raise TimeoutError("the read builder did not start")
        parent.recv()
        self._ready.set()

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def build(self, target: str) -> tuple[str, bytes, bytes | None] | None:
        """(media type, body, gzipped body) of ``GET target`` built in the builder process;
        None when it is not ready or cannot give a 200 (the caller builds it here)."""
        if not self._ready.is_set():
            return None
        with self._lock:
            conn = self._conn
            if conn is None or self._closed:
                return None
            analyses, (ident, lines) = self._news()
            try:
                # pickled before the pipe sees a byte: a value that cannot be sent (a line
                # holding something unpicklable) refuses this build, and the builder stays
                message = pickle.dumps((target, analyses, lines))
            except Exception as exc:
                log.warning("a build could not be sent to the read builder: %s", exc)
                self.refused += 1
                return None
            try:
                conn.send_bytes(message)
                if not conn.poll(BUILD_SECONDS):
                    raise TimeoutError(f"a build took over {BUILD_SECONDS:g} s")
                status, media_type, body, gz = conn.recv()
            except (EOFError, OSError, TimeoutError) as exc:
                log.warning("the read builder failed (%s); started again", exc)
                self._kill()
                self.refused += 1
                if not self._closed:
                    self.start()
                return None
            # sent: the builder has them now
            self._analyses_sent += len(analyses)
            if lines is not None:
                self._lines_sent = ident
        if status != 200:
            self.refused += 1
            return None
        self.built += 1
        return media_type, body, gz

    def _news(self) -> tuple[list[tuple[str, Any]], tuple[Any, Any]]:
        """What this process learnt since the last build it sent: the analyses done since,
        and (what identifies its lines, the lines) if they changed, else (None, None). Under
        the build lock; counted as sent only once they are."""
        from normfree.api.lines import LINES
        from normfree.api.services import ENRICHER

        analyses = ENRICHER.known_after(self._analyses_sent)
        ident, done = LINES.snapshot()
        if ident == self._lines_sent:
            return analyses, (None, None)
        return analyses, (ident, done)

    def _kill(self) -> None:
        from normfree.api.offload import end_worker

        self._ready.clear()
        proc, conn = self._process, self._conn
        self._process = self._conn = None
        end_worker(proc, conn)

    def close(self) -> None:
        """Stop the builder for good (the server is stopping); a build in flight is refused."""
        from normfree.api.offload import end_worker

        self._closed = True
        self._ready.clear()
        end_worker(self._process, self._conn)
