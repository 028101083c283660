"""Response hardening: security headers, per-client limits on costly anonymous reads, and who may
read the private half of an error.

- **Headers on every response** (:class:`SecurityHeadersMiddleware`, pure ASGI so it also covers
  static files, 304s, 413s and error pages): ``X-Content-Type-Options: nosniff`` (a JSON error
  that echoes user text is never sniffed as HTML), ``X-Frame-Options: DENY`` plus
  ``Content-Security-Policy: frame-ancestors 'none'`` (no page is framed, so no clickjacking of
  the submit form), ``Referrer-Policy: same-origin`` (formula text in URLs does not leak to other
  sites) and a ``Permissions-Policy`` that turns off device APIs the dashboard never uses. The
  CSP carries only ``frame-ancestors``: the pages' inline plot scripts stay as they are.
- **Rate limits on costly anonymous reads** (:class:`RateLimiter`): ``GET /api/candidates/{name}``
  parses any formula it is given (the parser's cost limits bound one parse to about a second of
  sympy, but not their number). We keep arbitrary formulas there, since a shareable link to any
  formula's properties and plot is a feature of the dashboard, and bound the rate instead: each
  client (by address) may make ``NORMFREE_ANONYMOUS_PARSES_PER_MINUTE`` such reads of names that
  are *not* already known (catalog names and stored candidates cost a dictionary lookup and are
  never limited), in a sliding one-minute window; token holders are not limited. Over the limit
  the answer is ``429`` with ``Retry-After``.
- **Private error detail**: a trial's stored error is one public line (with a reference id)
  followed by the full text; :func:`is_token_holder` decides who gets the full text.
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections import OrderedDict, deque
from functools import lru_cache
from typing import Any

from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from normfree.api.errors import ApiError

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"referrer-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
)


class SecurityHeadersMiddleware:
    """Add :data:`SECURITY_HEADERS` to every HTTP response (unless a route set one itself)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                present = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in SECURITY_HEADERS if k not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class RateLimiter:
    """A sliding one-minute window of events per client; bounded memory (LRU of clients)."""

    def __init__(self, per_minute: int, *, max_clients: int = 10_000) -> None:
        self.per_minute = per_minute
        self.max_clients = max_clients
        self._events: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def hit(self, client: str, now: float | None = None) -> float | None:
        """Record one event; None when allowed, else the seconds until the next is allowed."""
        if self.per_minute <= 0:
            return None
        now = time.monotonic() if now is None else now
        with self._lock:
            q = self._events.get(client)
            if q is None:
                q = self._events[client] = deque()
                while len(self._events) > self.max_clients:
                    self._events.popitem(last=False)
            else:
                self._events.move_to_end(client)
            while q and now - q[0] >= 60.0:
                q.popleft()
            if len(q) >= self.per_minute:
                return max(0.0, 60.0 - (now - q[0]))
            q.append(now)
            return None


@lru_cache(maxsize=8)
def _networks(spec: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """``NORMFREE_TRUSTED_PROXIES`` parsed: addresses and CIDR networks, comma separated."""
    return tuple(
        ipaddress.ip_network(p.strip(), strict=False) for p in spec.split(",") if p.strip()
    )


def _trusted(address: str, networks: tuple[Any, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in networks)


def client_id(request: Request) -> str:
    """Who the client is, for per-client limits: the peer address, unless the peer is a proxy
    named in ``NORMFREE_TRUSTED_PROXIES``; then the nearest X-Forwarded-For address that is not
    itself a trusted proxy. X-Forwarded-For from any other peer is ignored (a fresh value per
    request must not buy a fresh quota). uvicorn's own proxy handling is off (``serve``)."""
    peer = request.client.host if request.client else "unknown"
    settings = getattr(request.app.state, "settings", None)
    networks = _networks(settings.trusted_proxies) if settings is not None else ()
    if not networks or not _trusted(peer, networks):
        return peer
    hops = [h.strip() for h in ",".join(request.headers.getlist("x-forwarded-for")).split(",")]
    for hop in reversed([h for h in hops if h]):
        if not _trusted(hop, networks):
            return hop
    return peer


def queue_key(request: Request, token_name: str | None = None) -> str:
    """Whose queue a request's off-loop work joins (api.offload): a verified token's own (a
    token is a client: twenty users behind one address are twenty clients), else the peer's
    (:func:`client_id`). Only pass a token the route has already checked."""
    return f"token:{token_name}" if token_name else client_id(request)


def token_of(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def is_token_holder(request: Request) -> bool:
    """Whether the request carries a valid (unrevoked) write token."""
    token = token_of(request)
    if not token:
        return False
    return request.app.state.services.verify_token(token) is not None


def limit_parse(request: Request) -> None:
    """Charge one costly parse to an anonymous client; 429 with Retry-After over the limit."""
    limiter: RateLimiter | None = getattr(request.app.state, "parse_limiter", None)
    if limiter is None or is_token_holder(request):
        return
    wait = limiter.hit(client_id(request))
    if wait is not None:
        raise ApiError(
            429,
            "too_many_requests",
            f"too many new formulas from this client: at most {limiter.per_minute} per minute "
            "for anonymous reads; retry later, or send a token",
            headers={"Retry-After": str(max(1, math.ceil(wait)))},
        )


def known_name(request: Request, name: str) -> bool:
    """A catalog name or a stored candidate: a lookup, not a parse."""
    from normfree.search_space import catalog

    try:
        catalog.get(name)
        return True
    except (KeyError, ValueError):
        pass
    return request.app.state.services.repo.get_candidate(name) is not None


def limit_costly_name(request: Request, name: str) -> None:
    """Rate-limit reads of names that must be parsed (formulas, transform calls)."""
    if not known_name(request, name):
        limit_parse(request)


__all__ = [
    "SECURITY_HEADERS",
    "RateLimiter",
    "SecurityHeadersMiddleware",
    "client_id",
    "is_token_holder",
    "known_name",
    "limit_costly_name",
    "limit_parse",
]
