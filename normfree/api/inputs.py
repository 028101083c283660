"""What a request's input must be before any route, parser or database sees it (issue 28, 5).

A hostile reader must not be able to turn input into a 500. Three rules, each checked once here:

- **Integers fit the database.** Keys and cursors are 32-bit integer columns: PostgreSQL refuses
  ``2147483648`` in a comparison with one (a 500), and SQLite's driver cannot bind an integer past
  64 bits (``OverflowError``). :data:`MAX_DB_INT` bounds every integer path and query parameter
  (``api.deps`` builds its annotated types on it) and :func:`db_int` parses the ones that arrive
  as text (the trial cursor).
- **No control characters.** PostgreSQL cannot store or even compare a string holding NUL, and
  no name, formula or URL of ours needs a control character. :class:`InputGuard` refuses, with
  422, a request whose path or query holds any C0/C1 control character, or whose body holds one
  other than tab, newline and carriage return (a description may have lines); in a JSON body the
  escaped forms (``\\u0000``) count too, since they decode to the same character.
- **JSON nesting is bounded.** Python's JSON decoder recurses once per level: 30,000 nested
  brackets raise ``RecursionError``, in FastAPI's body parsing or ours, and a document a few
  hundred levels deep still reaches pydantic and our own recursive code. No body of this API
  nests more than a few levels, so the guard decodes each JSON body once, refuses one the
  decoder cannot finish or that nests past :data:`MAX_JSON_DEPTH`, with 422, before any route
  parses it.

The guard is a pure ASGI middleware inside the body limit (the body it buffers is already
bounded) and inside the security headers (its answers carry them), so it covers every route,
the pages' form included, and no route needs its own check.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qsl, unquote

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from normfree.api.errors import ApiError, error_response

MAX_DB_INT = 2**31 - 1  # the database's 32-bit integer keys
MAX_JSON_DEPTH = 32

# Paths and query values: every C0 and C1 control character (a URL needs none).
_URL_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Body text: the same, except tab, newline and carriage return (multi-line descriptions, CSV).
_TEXT_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# An escape that may decode to a control character (``\u0000``-``\u001f``, ``\u007f``-``\u009f``,
# ``\b``, ``\f``): only a body holding one has its decoded strings checked (``\\b`` is a false
# alarm that costs the check, never a wrong answer).
_CONTROL_ESCAPE = re.compile(r"\\(?:u00[0189][0-9a-fA-F]|u007[fF]|[bf])")
# Printable ASCII plus tab, newline and carriage return: an ASCII body is checked with one
# bytes.translate (C speed), other bodies with the regular expression.
_PLAIN_ASCII = bytes(range(0x20, 0x7F)) + b"\t\n\r"
# Bodies up to this size are checked on the event loop (tens of microseconds); larger ones in
# the thread pool.
_ON_LOOP_BYTES = 8 * 1024
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def db_int(text: str, field: str, *, minimum: int = 0) -> int:
    """``text`` as an integer in ``[minimum, MAX_DB_INT]``, or a 422 that names ``field``."""
    value = int(text) if text.isascii() and text.isdigit() and len(text) <= 10 else None
    if value is None or not minimum <= value <= MAX_DB_INT:
        raise ApiError(
            422,
            "validation_error",
            f"{field}: expected an integer from {minimum} to {MAX_DB_INT}",
            {"field": field},
        )
    return value


def control_character(text: str, *, multiline: bool = False) -> str | None:
    """The first control character in ``text`` as ``U+XXXX`` (None when there is none).
    ``multiline`` allows tab, newline and carriage return (body text)."""
    found = (_TEXT_CONTROL if multiline else _URL_CONTROL).search(text)
    return None if found is None else f"U+{ord(found.group()):04X}"


def json_problem(document: Any, *, strings: bool) -> str | None:
    """What is wrong with a decoded JSON document: nesting past :data:`MAX_JSON_DEPTH`, or (with
    ``strings``) a string, key or value, holding a control character. Level by level, so the
    walk never recurses, and only containers (and, with ``strings``, strings) are visited."""
    level: list[Any] = [document]
    depth = 0
    while level:
        below: list[Any] = []
        for item in level:
            kind = type(item)
            if kind is str:
                if (char := control_character(item, multiline=True)) is not None:
                    return f"a JSON string in the body holds the control character {char}"
                continue
            if depth >= MAX_JSON_DEPTH:
                return f"the JSON body nests more than {MAX_JSON_DEPTH} levels deep"
            values = item.values() if kind is dict else item
            if strings and kind is dict:
                below.extend(item)  # keys are strings too
            below.extend(v for v in values if type(v) in _VISIT or (strings and type(v) is str))
        level = below
        depth += 1
    return None


_VISIT = (dict, list)


def _body_control(body: bytes, text: str) -> str | None:
    """The first control character in a body (tab, newline, CR allowed) as ``U+XXXX``."""
    if body.isascii():
        stray = body.translate(None, _PLAIN_ASCII)
        return f"U+{stray[0]:04X}" if stray else None
    return control_character(text, multiline=True)


def body_problem(body: bytes, content_type: str) -> str | None:
    """Why a request body is refused (None when the guard lets it through).

    Bodies that are not UTF-8 or not valid JSON pass: the route answers those with its own
    message (what is wrong with the JSON and where)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if (char := _body_control(body, text)) is not None:
        return f"the body holds the control character {char}; send plain text"
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == "application/x-www-form-urlencoded":
        for key, val in parse_qsl(text, keep_blank_values=True):
            if (char := control_character(key + val, multiline=True)) is not None:
                return f"form field {key[:50]!r} holds the control character {char}"
        return None
    is_json = kind in ("", "application/json") or kind.endswith("+json")
    if not is_json or not text.lstrip().startswith(("{", "[")):
        return None
    try:
        # The C decoder recurses once per level and stops with RecursionError at the
        # interpreter's limit (about 1,000 levels): a clean refusal, never a crash.
        document = json.loads(text)
    except RecursionError:
        return f"the JSON body nests more than {MAX_JSON_DEPTH} levels deep"
    except ValueError:
        return None
    return json_problem(document, strings=_CONTROL_ESCAPE.search(text) is not None)


def url_problem(scope: Scope) -> str | None:
    """Why a request's path or query is refused (None when it is fine)."""
    if (char := control_character(scope.get("path", ""))) is not None:
        return f"the path holds the control character {char}"
    query = scope.get("query_string", b"").decode("latin-1")
    if query:
        for key, val in parse_qsl(query, keep_blank_values=True, errors="replace"):
            if (char := control_character(key + val)) is not None:
                return f"query parameter {key[:50]!r} holds the control character {char}"
        if (char := control_character(unquote(query, errors="replace"))) is not None:
            return f"the query holds the control character {char}"
    return None


class InputGuard:
    """Refuse control characters in the URL or body and deep JSON with 422 (module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, exc: ApiError) -> None:
        request = Request(scope, receive)
        response = error_response(
            request, exc.status_code, exc.error, exc.message, exc.detail, exc.headers
        )
        await response(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if (problem := url_problem(scope)) is not None:
            await self._refuse(scope, receive, send, ApiError(422, "invalid_input", problem))
            return
        if scope.get("method") not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            try:
                message = await receive()
            except StarletteHTTPException as exc:  # the body limit, on a chunked upload
                error = ApiError(exc.status_code, "request_too_large", str(exc.detail))
                await self._refuse(scope, receive, send, error)
                return
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay([message], receive), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        headers = dict(scope.get("headers") or [])
        content_type = headers.get(b"content-type", b"").decode("latin-1")
        if len(body) <= _ON_LOOP_BYTES:
            problem = body_problem(body, content_type)
        else:  # a large body's check (a millisecond or more) runs off the event loop
            problem = await run_in_threadpool(body_problem, body, content_type)
        if problem is not None:
            await self._refuse(scope, receive, send, ApiError(422, "invalid_input", problem))
            return
        body_message: Message = {"type": "http.request", "body": body, "more_body": False}
        await self.app(scope, _replay([body_message], receive), send)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A receive that answers the buffered messages first, then waits on the real one (for the
    disconnect a streaming answer listens for)."""
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
