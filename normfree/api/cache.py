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
- Builds are single-flight per key: 32 clients missing at once wait for one build instead of
  doing 32.
- Memory is bounded by entry count (LRU); each process has its own cache.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from fastapi import Request, Response

from normfree import __version__

# Responses a client must revalidate before reuse (the ETag makes that a cheap 304).
CACHE_CONTROL = "no-cache"


@dataclass(frozen=True)
class Cached:
    """One encoded response body."""

    body: bytes
    media_type: str


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
    """An LRU of encoded responses (or other built values) by key, one build per key at a time."""

    def __init__(self, max_entries: int = 2048) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[Hashable, threading.Lock] = {}
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Any:
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                self.hits += 1
            return hit

    def get_or_build(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """The cached entry, or ``build()``'s (stored), with one build per key at a time."""
        hit = self.get(key)
        if hit is not None:
            return hit
        with self._lock:
            gate = self._building.setdefault(key, threading.Lock())
        with gate:
            hit = self.get(key)  # built by the request we waited for
            if hit is not None:
                return hit
            try:
                value = build()
            finally:
                with self._lock:
                    self._building.pop(key, None)
            with self._lock:
                self.misses += 1
                self._entries[key] = value
                self._entries.move_to_end(key)
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
            return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def respond(
    request: Request,
    cache: ResponseCache,
    key: Hashable,
    build: Callable[[], Cached],
    *,
    status_code: int = 200,
    store: bool = True,
) -> Response:
    """A 304 when the client holds ``key``'s ETag, else the cached (or built) body.

    ``store=False`` builds every time and keeps nothing: for reads that are cheap, scale-free
    and rarely repeated (one trial of thousands), which would only push the shared boards out.
    """
    etag = etag_of(key)
    headers = {"ETag": etag, "Cache-Control": CACHE_CONTROL}
    if _matches(request, etag):
        return Response(status_code=304, headers=headers)
    hit = cache.get_or_build(key, build) if store else build()
    return Response(hit.body, status_code, media_type=hit.media_type, headers=headers)


def json_body(model: Any) -> Cached:
    """A pydantic model (or a list of them) as a cached JSON body."""
    if hasattr(model, "model_dump_json"):
        return Cached(model.model_dump_json().encode(), "application/json")
    from pydantic import TypeAdapter

    return Cached(TypeAdapter(type(model)).dump_json(model), "application/json")


def html_body(response: Response) -> Cached:
    """A rendered template response as a cached HTML body."""
    return Cached(bytes(response.body), "text/html; charset=utf-8")
