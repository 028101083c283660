"""Where a page links to: the one home of the dashboard's candidate URLs.

A candidate's page is addressed by its name percent-encoded into one path segment
(``/candidates/u%2F(1%2Babs(u))``), and the route takes the rest of the path (``{name:path}``),
so a name holding "/", "%", "#", "?", quotes or any unicode reaches the page whole. Templates
call ``candidate_url(name)``; building the URL with ``url_for('page_candidate', ...)`` instead
would leave "/" and "?" unescaped (a ratio formula's page would answer 500).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any
from urllib.parse import quote, unquote

from jinja2 import pass_context


@lru_cache(maxsize=4096)
def candidate_key(name: str) -> str:
    """``name`` as one URL path segment: every character outside [A-Za-z0-9_.~-] escaped."""
    return quote(str(name), safe="")


def candidate_url(request: Any, name: str) -> str:
    """The absolute URL of ``name``'s candidate page (under the app's root path).

    The candidates page's URL is looked up once per request and kept in its scope: a board
    page links every row, and each ``url_for`` walks the routers (raising and catching a
    ``NoMatchFound`` per router that does not hold the name): 15% of a 171-arm board page's
    rebuild under a writer (bench/results/live_reads.md)."""
    scope = request.scope
    base = scope.get(_CANDIDATES_URL)
    if base is None:
        base = scope[_CANDIDATES_URL] = str(request.url_for("page_candidates"))
    return f"{base}/{candidate_key(name)}"


_CANDIDATES_URL = "normfree.candidates_url"


def name_in_path(request: Any, decoded: str, suffix: str = "") -> str:
    """The candidate name of a ``/candidates/...`` (or ``/api/candidates/...``) request,
    decoded exactly once; ``suffix`` is the route's part after the name (``/results``).

    Read from the raw path when the server gives one: a name holding a literal "%25" must not
    be decoded twice (Starlette's test client decodes the path twice; uvicorn once). Without a
    raw path, the router's ``decoded`` parameter is all there is.
    """
    raw = request.scope.get("raw_path")
    if not raw:
        return decoded
    _, sep, rest = raw.decode("latin-1").partition("/candidates/")
    if not sep:
        return decoded
    rest = rest.split("?", 1)[0]
    if suffix and rest.endswith(suffix):
        rest = rest[: -len(suffix)]
    return unquote(rest, encoding="utf-8", errors="replace")


@pass_context
def _candidate_url_in_template(context: Any, name: str) -> str:
    return candidate_url(context["request"], name)


def install(env: Any) -> None:
    """Make ``candidate_url(name)`` callable from every template of ``env``."""
    env.globals["candidate_url"] = _candidate_url_in_template
