"""Every invalid request gets a 4xx whose message says what to fix; never a 500.

One error body for the whole API (``ErrorBody``): ``error`` is a stable machine code, ``message``
is a sentence for a person, ``detail`` carries structured extras (the validation error list, the
position of a formula error). Routers raise :class:`ApiError`; FastAPI's own validation and HTTP
errors and the parser's ``ExpressionError`` are translated by the handlers installed here, so no
router needs a try/except for them.

The request-size limit is an ASGI middleware rather than a dependency because it must act before
the body is read: a 10 MB JSON body is refused from its ``Content-Length`` (or, for a chunked
upload, as soon as the running byte count passes the limit) without being parsed.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)


class ErrorBody(BaseModel):
    """The body of every 4xx/5xx answer."""

    error: str
    message: str
    detail: Any = None


class ApiError(Exception):
    """A request the API refuses, with the status and the sentence that says what to fix."""

    def __init__(
        self, status_code: int, error: str, message: str, detail: Any = None, headers: Any = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.error = error
        self.message = message
        self.detail = detail
        self.headers = headers


# The list route of each kind (English plurals are not kind + "s": study -> studies).
_LISTS = {"study": "studies", "candidate": "candidates", "trial": "studies/ID/trials"}


def write_errors(
    forbidden: str = "Unknown, revoked or read-only token.",
) -> dict[int | str, dict[str, Any]]:
    """The documented 401 and 403 of a route that needs a write token (``api.deps``), the 403
    saying what else ``forbidden`` it (another token's row)."""
    return {
        401: {"model": ErrorBody, "description": "No bearer token."},
        403: {"model": ErrorBody, "description": forbidden},
    }


def not_found(kind: str, key: object) -> ApiError:
    where = _LISTS.get(kind, f"{kind}s")
    return ApiError(404, "not_found", f"no {kind} {key!s:.200}; list them at /api/{where}")


# Status codes' default machine codes, for HTTPExceptions raised by FastAPI/Starlette itself.
_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "request_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "too_many_requests",
}


def _wants_html(request: Request) -> bool:
    """Pages answer errors with a page; the JSON API (and scripts) with JSON."""
    if request.url.path.startswith("/api/"):
        return False
    return "text/html" in request.headers.get("accept", "")


def error_response(
    request: Request,
    status_code: int,
    error: str,
    message: str,
    detail: Any = None,
    headers: Any = None,
) -> Response:
    body = ErrorBody(error=error, message=message, detail=jsonable_encoder(detail))
    if _wants_html(request):
        templates = getattr(request.app.state, "templates", None)
        if templates is not None:
            return templates.TemplateResponse(
                request,
                "error.html",
                {"status_code": status_code, "error": body},
                status_code=status_code,
                headers=headers,
            )
        return HTMLResponse(f"<h1>{status_code}</h1><p>{message}</p>", status_code, headers)
    return JSONResponse(body.model_dump(mode="json"), status_code=status_code, headers=headers)


def _loc(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) if parts else "body"


def describe_validation(errors: list[dict[str, Any]]) -> str:
    """One readable sentence per problem: where it is and what pydantic wants instead."""
    lines = []
    for err in errors[:10]:
        msg = str(err.get("msg", "invalid value"))
        if err.get("type") == "json_invalid":
            ctx = err.get("ctx") or {}
            lines.append(f"the body is not valid JSON ({ctx.get('error', msg)})")
        elif err.get("type") == "missing":
            lines.append(f"{_loc(err.get('loc', ()))}: this field is required")
        else:
            lines.append(f"{_loc(err.get('loc', ()))}: {msg}")
    more = f" (and {len(errors) - 10} more)" if len(errors) > 10 else ""
    return "; ".join(lines) + more


async def _validation_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    # ``input`` may echo a huge or binary body back; keep the answer small and printable.
    slim = [
        {k: v for k, v in e.items() if k in ("type", "loc", "msg")} | {"loc": list(e["loc"])}
        for e in errors[:20]
    ]
    return error_response(request, 422, "validation_error", describe_validation(errors), slim)


async def _http_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    code = _CODES.get(exc.status_code, "error")
    message = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail, default=str)
    if exc.status_code == 404 and message == "Not Found":
        message = f"no route {request.url.path!r}; the API is documented at /docs"
    if exc.status_code == 405:
        message = f"{request.method} is not allowed on {request.url.path}; see /docs"
    return error_response(request, exc.status_code, code, message, headers=exc.headers)


async def _api_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(
        request, exc.status_code, exc.error, exc.message, exc.detail, headers=exc.headers
    )


async def _unexpected_handler(request: Request, exc: Exception) -> Response:
    # A bug, not a bad request: log it with its traceback under a reference id and answer one
    # line with that id, so a report can be matched to the log without leaking internals.
    # Starlette answers this one from its outermost layer, outside every middleware of ours,
    # so the security headers are added here (a 500 page is as framable as any other).
    from normfree.api.security import SECURITY_HEADERS
    from normfree.workers.errors import new_reference

    ref = new_reference()
    log.exception("unhandled error on %s %s [ref %s]", request.method, request.url.path, ref)
    return error_response(
        request,
        500,
        "internal_error",
        f"internal error (reference {ref}); the details are in the server log",
        {"reference": ref},
        headers={k.decode(): v.decode() for k, v in SECURITY_HEADERS},
    )


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_handler)
    app.add_exception_handler(StarletteHTTPException, _http_handler)
    app.add_exception_handler(ApiError, _api_error_handler)
    app.add_exception_handler(Exception, _unexpected_handler)


class BodyLimitMiddleware:
    """Refuse request bodies over ``max_bytes`` with 413, before anything parses them."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, size: str) -> None:
        body = ErrorBody(
            error="request_too_large",
            message=(
                f"the request body is {size} bytes; the limit is {self.max_bytes} bytes "
                "(server setting NORMFREE_MAX_REQUEST_BYTES): send a smaller body"
            ),
        )
        await JSONResponse(body.model_dump(), status_code=413)(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                await JSONResponse(
                    ErrorBody(
                        error="bad_request", message="Content-Length must be an integer"
                    ).model_dump(),
                    status_code=400,
                )(scope, receive, send)
                return
            if declared > self.max_bytes:
                await self._refuse(scope, receive, send, str(declared))
                return

        seen = 0
        limit = self.max_bytes

        async def counting_receive() -> Message:
            # A chunked body has no Content-Length: count as it arrives. The HTTPException is
            # turned into the same 413 answer by the app's handler for HTTP errors.
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise StarletteHTTPException(
                        413,
                        f"the request body is more than {limit} bytes; the limit is {limit} "
                        "bytes (server setting NORMFREE_MAX_REQUEST_BYTES): send a smaller body",
                    )
            return message

        await self.app(scope, counting_receive, send)
