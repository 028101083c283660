"""Encoded responses cached by what they depend on, with ETags and ``If-None-Match``.

Why: a leaderboard, a study's cells or a candidate list change only when a trial finishes or a
candidate is stored, while dashboards and scripts read them many times a second. Each cached
read names a *key*: its parameters plus the versions of the data it shows, read from the
database on every request in one small query (``read_versions`` counters bumped by the writing
transaction, a study's per-status counts, a trial's ``updated_at``). So a read is never stale,
even with several API processes or with writers in other processes (Ray workers), and the cost
of a hit is that query plus a dict lookup; no time-to-live is involved.

- The ETag is a hash of the key, so a client that sends ``If-None-Match`` gets a 304 before any
  body is built or even looked up.
- Builds are single-flight per key, and while one runs, requests for the same read get its
  previous version (``ResponseCache``): 32 clients missing at once, or a stream of finished
  trials, cost one build at a time, not one per request.
- Under a stream of writes (a family whose version changed in the last
  ``settings.read_stale_window_s``), no reader waits for a build: the one that finds a new
  version starts its build in the background and waits ``read_fresh_wait_s`` at most, then
  gets the previous version (at most the commits made during one build behind; issue 27's
  live reads); every other reader of the family meanwhile gets the previous version at once.
  A lone write is still read back at once: a quiet family's reader waits (for a build in the
  builder process too, when there is one).
- A build's own lookups (a page's model, a study's cells) build their parts in full on the
  build's thread: a page stored under its new key is made of its parts' new versions.
- Those background builds run in the server's builder process when it has one
  (``api.builder``, :attr:`ResponseCache.remote`); an answer built there serves only while its
  family stays hot, then the family is built here again (what this process knows beside the
  database and does not send there, a prescreen or an importance refresh, may have moved).
- Bodies are gzipped once per entry for clients that accept it.
- Memory is bounded by entry count (LRU); each process has its own cache.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from fastapi import Request, Response
from starlette.concurrency import run_in_threadpool

from normfree import __version__
from normfree.api import fastlane

log = logging.getLogger(__name__)

# How deep this thread is in ResponseCache builds (a build's own lookups build their parts).
_building_here = threading.local()

# Responses a client must revalidate before reuse (the ETag makes that a cheap 304).
CACHE_CONTROL = "no-cache"


# Smaller bodies are not worth compressing (one TCP segment either way).
GZIP_MIN_BYTES = 1400


@dataclass
class Cached:
    """One encoded response body (and its gzip, made on first demand)."""

    body: bytes
    media_type: str
    _gz: bytes | None = None
    # Built in the builder process (``api.builder``): served only while its family is hot.
    remote: bool = False

    def gzipped(self) -> bytes:
        if self._gz is None:  # two racing requests compress twice; both results are equal
            self._gz = gzip.compress(self.body, compresslevel=5, mtime=0)
        return self._gz


def etag_of(key: Hashable) -> str:
    """A weak ETag naming ``key`` (and this normfree version, so a deploy changes every tag)."""
    digest = hashlib.blake2b(repr((__version__, key)).encode(), digest_size=12).hexdigest()
    return f'W/"{digest}"'


def _matches(request: Request, etag: str) -> bool:
    header = request.headers.get("if-none-match")
    if not header:
        return False
    if header.strip() == "*":
        return True
    tags = {t.strip() for t in header.split(",")}
    return etag in tags or etag.removeprefix("W/") in tags


class ResponseCache:
    """An LRU of built values by key, one build per key at a time, stale while another builds.

    A key is ``(family, version)``: the family names what is shown (a proxy's board with its
    filters, one study's summary), the version what it depends on. While a request builds a
    family's new version, other requests for that family get its latest built version instead
    of queueing behind the build: under a stream of writes (every finished trial moves a
    board's version) at most one build per family runs at a time, and readers stay fast. A
    reader never sees a version older than the one current when the running build started.
    """

    def __init__(
        self,
        max_entries: int = 2048,
        *,
        stale_window_s: float = 0.0,
        fresh_wait_s: float = 0.02,
    ) -> None:
        self.max_entries = max_entries
        # A family whose version changed less than this long ago is *hot* (a stream of writes):
        # a reader of its next version waits ``fresh_wait_s`` for the build, then gets the
        # previous version while the build finishes in the background. 0: every reader of a
        # new version with nothing building waits for it (read-your-writes, the test suite).
        self.stale_window_s = stale_window_s
        self.fresh_wait_s = fresh_wait_s
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self._latest: OrderedDict[Hashable, tuple[int, Hashable, Any]] = OrderedDict()
        self._busy: dict[Hashable, int] = {}
        self._lock = threading.Lock()
        self._building: dict[Hashable, threading.Lock] = {}
        self._background: dict[Hashable, Future[Any]] = {}
        self._changed: dict[Hashable, float] = {}  # family -> when its latest was replaced
        self._executor: ThreadPoolExecutor | None = None
        self._seq = 0
        self.hits = 0
        self.misses = 0
        self.stale = 0
        # Per family, the builds finished after it served its previous version meanwhile (and
        # the families whose answers built in the builder process cooled): the fast lane
        # replays an answer of a family only while its count holds (:meth:`guard`), so the
        # followers of one read after a commit replay its leader's answer, the stale one
        # included, only until the newer version is in. Per family, not one count for all:
        # with one count, each rebuild under a writer (several a second) closed the lane for
        # every read of every page, not just the rebuilt one's.
        self._voids: dict[Hashable, int] = {}
        self._void_era = 0  # moves when ``_voids`` is cleared (bounded memory), voiding all
        self.builds = 0  # the voids in all, for figures
        self._stale_out: set[Hashable] = set()
        # ``remote(target)``: a hot family's background build of the read at ``target`` (its
        # whole URL) in the builder process, (media type, body, gzip) or None (built
        # here). Set by a server that has a builder (``api.builder``).
        self.remote: Callable[[str], tuple[str, bytes, bytes | None] | None] | None = None
        self._remote_families: set[Hashable] = set()  # whose latest was built there
        self._sweeper: threading.Thread | None = None

    def get(self, key: Hashable) -> Any:
        with self._lock:
            hit = self._entries.get(key)
            if getattr(hit, "remote", False) and not self._hot(key[0]):  # type: ignore[index]
                # built in the builder process, and the stream of writes has ended: built
                # here again, with this process's own analyses and lines
                del self._entries[key]
                hit = None
            if hit is not None:
                self._entries.move_to_end(key)
                self.hits += 1
            return hit

    def lookup(
        self,
        key: tuple[Hashable, Hashable],
        build: Callable[[], Any],
        *,
        stale_ok: bool = True,
        target: str | None = None,
    ) -> tuple[Hashable, Any]:
        """(the key served, its value): ``key``'s, built if needed, or (``stale_ok``) the
        family's latest while a newer one builds (another request's build, or, for a hot
        family, this request's own build after ``fresh_wait_s``). ``target``: the read's whole
        URL, for a hot family's build in the builder process (:attr:`remote`)."""
        hit = self.get(key)
        if hit is not None:
            return key, hit
        family = key[0]
        if getattr(_building_here, "depth", 0):
            # a build's own parts (a page's model, a study's cells): built here, in full.
            # Waiting fresh_wait_s for a part and then taking its previous version stored the
            # outer answer under its new key with old parts; a part already being built on
            # another thread is waited for (it cannot wait on us: parts nest one way), a part
            # only queued behind the busy build threads is built here instead
            with self._lock:
                future = self._background.get(key)
            if future is not None and future.running():
                return key, future.result()
            stale_ok = False
        with self._lock:
            latest = self._latest.get(family)
            if stale_ok and latest is not None:
                if self._busy.get(family):
                    # a build of this family runs: only the reader that started it waits
                    # (below); every other reader takes the latest at once (each waiting
                    # fresh_wait_s in turn was the p99 of every read under a writer)
                    return self._stale_answer(family, latest)
                if self._hot(family):
                    future = self._submit(key, self._remotely(target, build))
                else:
                    future = None
            else:
                future = None
            # a known family's next version (a commit moved its key): not its first build, nor
            # a version built again after its entry was dropped (the sweep below, eviction)
            moved = stale_ok and latest is not None and latest[1] != key
        if future is not None:
            try:
                return key, future.result(timeout=self.fresh_wait_s)
            except FutureTimeout:
                with self._lock:
                    latest = self._latest.get(family)
                    if latest is not None:
                        return self._stale_answer(family, latest)
                return key, future.result()  # the family's latest was evicted meanwhile
        gate = self._gate(key)
        with gate:
            hit = self.get(key)  # built by the request we waited for
            if hit is not None:
                return key, hit
            with self._lock:
                seq = self._begin(family)
            # A quiet family's next version: its reader waits (a lone write is read back at
            # once), but the build goes to the builder process when there is one. Built here,
            # the first version after a quiet spell shared this process with every reader and
            # took 200-300 ms while the family's other readers got the version before it (two
            # commits behind at a stream's start; bench/results/live_reads.md). Its answer then
            # serves while the family is hot, like every answer built there.
            return key, self._build(key, self._remotely(target, build) if moved else build, seq)

    def _remotely(self, target: str | None, build: Callable[[], Any]) -> Callable[[], Any]:
        """``build``, or first the builder process's answer for ``target`` when there is one."""
        remote = self.remote
        if remote is None or target is None:
            return build

        def remote_build() -> Any:
            got = remote(target)
            if got is None:
                return build()
            media_type, body, gz = got
            return Cached(body, media_type, gz, remote=True)

        return remote_build

    def _stale_answer(self, family: Hashable, latest: tuple[int, Hashable, Any]) -> tuple:
        """The family's latest, for a reader while a newer one builds (under the lock)."""
        self.stale += 1
        self._stale_out.add(family)
        return latest[1], latest[2]

    def _hot(self, family: Hashable) -> bool:
        changed = self._changed.get(family)
        return (
            self.stale_window_s > 0
            and changed is not None
            and time.monotonic() - changed < self.stale_window_s
        )

    def _gate(self, key: Hashable) -> threading.Lock:
        with self._lock:
            return self._building.setdefault(key, threading.Lock())

    def _begin(self, family: Hashable) -> int:
        """A build of ``family`` starts (under the lock): its sequence number."""
        self._busy[family] = self._busy.get(family, 0) + 1
        self._seq += 1
        return self._seq

    def _submit(self, key: tuple[Hashable, Hashable], build: Callable[[], Any]) -> Future[Any]:
        """``key``'s build on the cache's background threads (under the lock)."""
        if self._executor is None:
            # One thread: the rebuilds hold the GIL, and every thread that wants it takes its
            # turn; with two rebuild threads the event loop got a third of the GIL, with one
            # half: under a writer the reads' p50 fell 3x and their p99 2x; answers fell behind
            # by about as many commits at most (3-6), but fewer were current, since builds
            # now queue one after another (bench/results/live_reads.md, 2026-12-04)
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="normfree-rebuild")
        seq = self._begin(key[0])
        future = self._executor.submit(self._build, key, build, seq)
        self._background[key] = future

        def done(f: Future[Any]) -> None:
            with self._lock:
                self._background.pop(key, None)
            if f.exception() is not None:  # a waiter raised it already, or nobody waited
                log.warning("background build of %r failed: %s", key, f.exception())

        future.add_done_callback(done)
        return future

    def _build(self, key: tuple[Hashable, Hashable], build: Callable[[], Any], seq: int) -> Any:
        """Build ``key`` (its family marked busy by :meth:`_begin`) and keep the value."""
        family = key[0]
        _building_here.depth = getattr(_building_here, "depth", 0) + 1
        try:
            value = build()
        except BaseException:
            with self._lock:
                # answers replayed meanwhile (the previous version) would stay replayed
                # until the next commit, and no reader would come to build it again
                self._void_stale(family)
            raise
        finally:
            _building_here.depth -= 1
            with self._lock:
                self._building.pop(key, None)
                self._busy[family] -= 1
                if not self._busy[family]:
                    del self._busy[family]
        with self._lock:
            self.misses += 1
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
            held = self._latest.get(family)
            if held is None or held[0] < seq:  # a slower, older build never wins
                if held is not None and held[1] != key:
                    self._changed[family] = time.monotonic()
                    while len(self._changed) > self.max_entries:
                        self._changed.pop(next(iter(self._changed)))
                    # the version it replaces is asked for only by a request whose key was
                    # read before the commit (rare, and built again then): kept, each commit's
                    # superseded boards and studies (models of every row) filled the LRU
                    # under a writer, and each full garbage collection walked them all
                    self._entries.pop(held[1], None)
                self._latest[family] = (seq, key, value)
            self._latest.move_to_end(family)
            while len(self._latest) > self.max_entries:
                self._latest.popitem(last=False)
            # after the entry is in: a reader that sees the new count finds it
            self._void_stale(family)
            if getattr(value, "remote", False):
                self._remote_families.add(family)
                self._sweep_later()
        return value

    def _sweep_later(self) -> None:
        """Start the sweeper (under the lock) if it is not running: it watches the families
        whose latest was built in the builder process until their stream of writes ends."""
        if self._sweeper is None or not self._sweeper.is_alive():
            self._sweeper = threading.Thread(
                target=self._sweep, name="normfree-remote-sweep", daemon=True
            )
            self._sweeper.start()

    def _sweep(self) -> None:
        """While families built there are hot, wait; when one cools, move ``builds`` (the
        fast lane's stamp) so its answers are no longer replayed: the next reader goes to the
        route, which drops the entry (:meth:`get`) and builds the family here."""
        while True:
            time.sleep(max(0.05, self.stale_window_s / 4))
            with self._lock:
                cooled = {f for f in self._remote_families if not self._hot(f)}
                if cooled:
                    self._remote_families -= cooled
                    for family in cooled:
                        self._void(family)
                if not self._remote_families:
                    self._sweeper = None
                    return

    def _void_stale(self, family: Hashable) -> None:
        """A build of ``family`` ended (under the lock): if the family served its previous
        version meanwhile, void the family (:meth:`_void`) so the fast lane stops replaying
        that answer."""
        if family in self._stale_out:
            self._stale_out.discard(family)
            self._void(family)

    def _void(self, family: Hashable) -> None:
        """Stop the fast lane replaying answers of ``family`` (under the lock)."""
        if len(self._voids) >= 4 * self.max_entries and family not in self._voids:
            self._voids.clear()  # a dropped count could come back equal: a new era voids all
            self._void_era += 1
        self._voids[family] = self._voids.get(family, 0) + 1
        self.builds += 1

    def epoch(self, family: Hashable) -> tuple[int, int]:
        """What an answer of ``family`` replayed by the fast lane must still see (no lock: two
        dict reads; read before the answer is looked up, so a void after it counts)."""
        return self._void_era, self._voids.get(family, 0)

    def guard(self, family: Hashable, epoch: tuple[int, int]) -> Callable[[], bool]:
        """The fast lane's check that an answer of ``family`` read at ``epoch`` still holds."""

        def valid() -> bool:
            return self.epoch(family) == epoch

        return valid

    def get_or_build(self, key: tuple[Hashable, Hashable], build: Callable[[], Any]) -> Any:
        """The value for ``key`` (or its family's latest while another request builds)."""
        return self.lookup(key, build)[1]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._latest.clear()


def _gzip_ok(request: Request) -> bool:
    return "gzip" in request.headers.get("accept-encoding", "")


def respond(
    request: Request,
    cache: ResponseCache,
    key: tuple[Hashable, Hashable],
    build: Callable[[], Cached],
    *,
    status_code: int = 200,
    store: bool = True,
    replay: bool = True,
    rekey: fastlane.Rekey | None = None,
) -> Response:
    """A 304 when the client holds ``key``'s ETag, else the cached (or built) body.

    The body is gzipped once per entry for clients that accept it (boards are 100-200 kB of
    JSON or HTML, a sixth of that compressed). ``store=False`` builds every time and keeps
    nothing: for reads that are cheap, scale-free and rarely repeated (one trial of thousands),
    which would only push the shared entries out. ``replay``: a fresh stored answer may be
    replayed by the fast lane while the database is unchanged (``api.fastlane``); off for a
    key that also depends on something outside the database and the analyses. ``rekey``
    (the route's key for the request, computed again) lets the lane revalidate the answer
    after a commit (``fastlane.allow``).
    """
    etag = etag_of(key)
    headers = _headers(etag)
    if _matches(request, etag):
        return Response(status_code=304, headers=headers)
    if store:
        # a read the builder process can answer too: the whole URL, so that the links a page
        # makes (``url_for``) name this server as this process's would
        remote = replay and status_code == 200 and not request.scope.get("root_path")
        epoch = cache.epoch(key[0])
        served, hit = cache.lookup(key, build, target=str(request.url) if remote else None)
        if served != key:  # another request is building the newer version: the latest one
            headers["ETag"] = etag_of(served)
        if replay and status_code == 200:
            # the previous version too: the same request gets the same answer until a commit
            # or the family's finished build (its epoch) moves it; followers of one read after
            # a commit replay the leader's answer instead of each going the slow way
            fastlane.allow(request.scope, served, rekey, cache.guard(key[0], epoch))
    else:
        hit = build()
    return _encoded(request, hit, headers, status_code)


def _headers(etag: str) -> dict[str, str]:
    return {"ETag": etag, "Cache-Control": CACHE_CONTROL, "Vary": "Accept-Encoding"}


def _encoded(request: Request, hit: Cached, headers: dict[str, str], status_code: int) -> Response:
    body = hit.body
    if _gzip_ok(request) and len(body) >= GZIP_MIN_BYTES:
        body = hit.gzipped()
        headers["Content-Encoding"] = "gzip"
    return Response(body, status_code, media_type=hit.media_type, headers=headers)


def answer_from_cache(
    request: Request,
    cache: ResponseCache,
    key: Hashable,
    *,
    status_code: int = 200,
    replay: bool = True,
    rekey: fastlane.Rekey | None = None,
) -> Response | None:
    """The answer when nothing must be built: a 304, or ``key``'s stored body; else None.

    Never blocks (one dict lookup under a lock held for microseconds), so the event loop may
    call it directly; only a miss goes to the thread pool (:func:`serve`). A stored 200 is
    marked for the fast lane's replay (``replay``), revalidated after a commit with ``rekey``.
    """
    etag = etag_of(key)
    if _matches(request, etag):
        return Response(status_code=304, headers=_headers(etag))
    epoch = cache.epoch(key[0])  # type: ignore[index]
    hit = cache.get(key)
    if hit is None:
        return None
    if replay and status_code == 200:
        fastlane.allow(request.scope, key, rekey, cache.guard(key[0], epoch))  # type: ignore[index]
    return _encoded(request, hit, _headers(etag), status_code)


async def serve(
    request: Request,
    cache: ResponseCache,
    key: tuple[Hashable, Hashable],
    build: Callable[[], Cached],
    *,
    store: bool = True,
    replay: bool = True,
    rekey: fastlane.Rekey | None = None,
) -> Response:
    """:func:`respond` for ``async`` routes: a hit is answered on the event loop, a miss is
    built in the thread pool.

    Why: a hit costs a few microseconds, while handing a request to the thread pool and back
    costs more than that under load (and every sync route and dependency pays it). The routes
    compute the key before calling this, through ``api.reads.small_read``: on the loop for SQLite,
    in the thread pool for a server database.
    """
    if store:
        fast = answer_from_cache(request, cache, key, replay=replay, rekey=rekey)
        if fast is not None:
            return fast
    return await run_in_threadpool(
        respond, request, cache, key, build, store=store, replay=replay, rekey=rekey
    )


def json_body(model: Any) -> Cached:
    """A pydantic model (or a list of them) as a cached JSON body."""
    if hasattr(model, "model_dump_json"):
        return Cached(model.model_dump_json().encode(), "application/json")
    from pydantic import TypeAdapter

    return Cached(TypeAdapter(type(model)).dump_json(model), "application/json")


def html_body(response: Response) -> Cached:
    """A rendered template response as a cached HTML body."""
    return Cached(bytes(response.body), "text/html; charset=utf-8")
