"""Dependencies: the one service state, settings, and who may read and write.

Auth, in one place:

- Writes (every POST) need ``Authorization: Bearer <token>``. No header, or a header that is not
  a bearer token, answers **401** with ``WWW-Authenticate: Bearer``; so does an expired token
  (``error="invalid_token"``, the message says when it expired); a token that is unknown or
  revoked answers **403**. Tokens are created and revoked with ``normfree token create|revoke``
  and stored hashed by the storage layer; the API only ever compares hashes through it.
- Reads (GET) are public while ``settings.public_reads`` is true (the default); when it is false,
  reads need a valid token too (same 401/403 rules).
- Scopes (``storage.tokens``): ``read`` < ``write`` < ``admin``. A write with a read-only token
  answers **403**. A study or reference set belongs to the token that created it: controlling,
  replacing or deleting it needs that token or an admin one (**403** otherwise,
  :func:`require_owner`). Create an admin token with ``normfree token create NAME --scope admin``.
- The dashboard's submit form has a token field (a plain HTML form cannot send a bearer header);
  its page route checks that field with the same :func:`check_token`, so the form and the API
  follow one rule: no valid token, no write. The form never stores the token (not in a cookie,
  not in the page it answers with).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from normfree.api.errors import ApiError
from normfree.api.export import FORMAT_HELP, Format
from normfree.api.inputs import MAX_DB_INT
from normfree.api.services import ServiceState
from normfree.settings import Settings
from normfree.storage.tokens import Principal

# The path and query parameters several routes (JSON and pages) take, defined once so that each
# is validated the same way everywhere.
MAX_ID = MAX_DB_INT  # the database's 32-bit integer keys (``api.inputs``)
IdPath = Annotated[int, Path(ge=1, le=MAX_ID)]
StudyIdQuery = Annotated[int | None, Query(ge=1, le=MAX_ID)]
GroupQuery = Annotated[str | None, Query(max_length=100)]
PropertyQuery = Annotated[
    list[str] | None,
    Query(
        alias="property",
        max_length=10,
        description="Repeatable. 'bounded' (the property holds) or 'name=value', e.g. "
        "'monotone=increasing'.",
    ),
]
# ``?format=``: the JSON document (default) or the same items as a file (``api.export``).
FormatQuery = Annotated[Format, Query(description=FORMAT_HELP)]

ArchivedQuery = Annotated[bool, Query(description="Show archived rows too (left out by default).")]
DryRunQuery = Annotated[bool, Query(description="List what would be removed, and remove nothing.")]
# An arm's key (``storage.arm_key``: a hex digest), as a study's cells list it.
ArmPath = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[0-9a-f]+$")]

# auto_error=False: we answer missing credentials ourselves, with our error body and a hint.
bearer = HTTPBearer(
    auto_error=False,
    description="A write token from `normfree token create NAME` (sent as a bearer token).",
)


# The dependencies that do no I/O are ``async def``: FastAPI runs a plain ``def`` dependency in
# its thread pool, and on a cached read those hand-offs (one per dependency) cost more server
# time than the read itself (profile in bench/results/read_scale.md).


async def get_state(request: Request) -> ServiceState:
    return request.app.state.services


async def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


StateDep = Annotated[ServiceState, Depends(get_state)]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]

MISSING_TOKEN = (
    "this request needs a token: send 'Authorization: Bearer <token>' "
    "(create one with `normfree token create NAME`)"
)
BAD_TOKEN = (
    "the token is unknown, revoked or expired: create a new one with `normfree token create NAME`"
)


def _missing_token() -> ApiError:
    return ApiError(401, "unauthorized", MISSING_TOKEN, headers={"WWW-Authenticate": "Bearer"})


def check_principal(state: ServiceState, token: str | None, scope: str = "write") -> Principal:
    """Who the token is, or an ApiError: 401 when absent or expired, 403 when unknown, revoked
    or below ``scope``."""
    if not token:
        raise _missing_token()
    who = state.principal(token)
    if who is None:
        expired = state.repo.token_expiry(token) if len(token) <= 256 else None
        if expired is not None:
            # RFC 6750: an expired token is not credentials (401, invalid_token), where an
            # unknown or revoked one is refused (403); asked only on this failure path
            raise ApiError(
                401,
                "unauthorized",
                f"the token expired at {expired.isoformat(timespec='seconds')}: create a new "
                "one with `normfree token create NAME --expires 30d`",
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        raise ApiError(403, "forbidden", BAD_TOKEN)
    if not who.allows(scope):
        raise ApiError(
            403,
            "forbidden",
            f"token {who.name!r} has scope {who.scope!r}; this request needs {scope!r}",
        )
    return who


def check_token(state: ServiceState, token: str | None, scope: str = "write") -> str:
    """The token's name (see :func:`check_principal`)."""
    return check_principal(state, token, scope).name


def require_owner(who: Principal, owner_token_id: int | None, what: str) -> None:
    """403 unless ``who`` created the row (``owner_token_id``) or is an admin token."""
    if not who.owns(owner_token_id):
        raise ApiError(
            403,
            "forbidden",
            f"{what} belongs to another token; only the token that created it, or an admin "
            "token, may change it",
        )


def require_writer(state: StateDep, creds: Credentials) -> str:
    """Writes: a valid bearer token; answers with the token's name (recorded as submitter)."""
    return check_token(state, creds.credentials if creds else None)


def require_write_principal(state: StateDep, creds: Credentials) -> Principal:
    """Writes that create or change owned rows: the token as a :class:`Principal`."""
    return check_principal(state, creds.credentials if creds else None)


async def require_reader(state: StateDep, settings: SettingsDep, creds: Credentials) -> str | None:
    """Reads: public unless ``public_reads`` is off; then any valid token, a read-only one
    included (the token lookup, a database read, runs in the thread pool like any blocking
    call)."""
    if settings.public_reads:
        return None
    return await run_in_threadpool(check_token, state, creds.credentials if creds else None, "read")


async def writer_token(creds: Credentials) -> str:
    """A write's bearer token, unchecked (401 when there is none): for a route that checks it
    (:func:`check_token`) in the same thread-pool call as its own work, one hand-off instead of
    :data:`Writer`'s two."""
    if creds is None or not creds.credentials:
        raise _missing_token()
    return creds.credentials


Writer = Annotated[str, Depends(require_writer)]
WritePrincipal = Annotated[Principal, Depends(require_write_principal)]
WriterToken = Annotated[str, Depends(writer_token)]
Reader = Annotated[str | None, Depends(require_reader)]
