"""API tokens, stored as hashes, each with a scope (read < write < admin) and an optional expiry.

A token's scope is the highest of its stored ``scopes`` (a list for history; tokens made before
migration 0009 with none got ``write``). ``read`` tokens read when reads are private, ``write``
tokens also create candidates, studies and reference sets and control what they created, and
``admin`` tokens may control, replace or delete anything (``api.deps``).

Part of :class:`normfree.storage.Repository` (see ``storage/repository.py`` for the guarantees).
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select, update

from normfree.storage._common import (
    RepositoryBase,
    _iso,
    _token_hash,
)
from normfree.storage.models import (
    ApiTokenRow,
    utcnow,
)
from normfree.storage.records import TokenRecord

# The scopes, in order: each allows what the ones before it allow.
SCOPES: tuple[str, ...] = ("read", "write", "admin")


def scope_level(scope: str) -> int:
    """The rank of a scope in :data:`SCOPES` (ValueError for an unknown one)."""
    try:
        return SCOPES.index(scope)
    except ValueError:
        raise ValueError(f"unknown scope {scope!r}; choose from {', '.join(SCOPES)}") from None


def effective_scope(scopes: Sequence[Any] | None) -> str:
    """The highest known scope of a stored list (``write`` for an empty one: tokens had no
    scope before migration 0009, and every one of them could write)."""
    known = [str(s) for s in scopes or () if str(s) in SCOPES]
    return max(known, key=SCOPES.index) if known else "write"


@dataclass(frozen=True)
class Principal:
    """Who a request's token is: its row id (what studies and reference sets record as their
    owner), its name (recorded as a submitter) and its scope."""

    id: int
    name: str
    scope: str

    def allows(self, scope: str) -> bool:
        return scope_level(self.scope) >= scope_level(scope)

    @property
    def admin(self) -> bool:
        return self.scope == "admin"

    def owns(self, owner_token_id: int | None) -> bool:
        """Whether it may change a row owned by ``owner_token_id`` (its own, or any as admin);
        a row with no owner (CLI-made, or older than migration 0009) is an admin's to change."""
        return self.admin or (owner_token_id is not None and owner_token_id == self.id)


@functools.cache
def _active_by_hash() -> Any:
    """The active token with a hash (built once: every write request asks it)."""
    t = ApiTokenRow.__table__
    return select(t.c.id, t.c.name, t.c.scopes, t.c.expires_at).where(
        t.c.token_hash == bindparam("hash"), t.c.revoked_at.is_(None)
    )


def _expired(expires_at: Any) -> bool:
    if expires_at is None:
        return False
    if isinstance(expires_at, str):  # a Core read on SQLite hands back text
        expires_at = datetime.fromisoformat(expires_at)
    if expires_at.tzinfo is None:
        from datetime import UTC

        expires_at = expires_at.replace(tzinfo=UTC)
    return bool(expires_at <= utcnow())


class TokenRepository(RepositoryBase):
    """API write tokens, stored as hashes."""

    # -- API tokens --------------------------------------------------------------------------

    def create_token(
        self, name: str, scopes: Sequence[str] = ("write",), *, expires_at: datetime | None = None
    ) -> str:
        """Create a token and return its plaintext (shown once; only its SHA-256 is stored).

        A revoked token's name may be reused; an active one raises ValueError. ``expires_at``:
        after it the token is refused like a revoked one (None: never).
        """
        for scope in scopes:
            scope_level(scope)
        plaintext = "nf_" + secrets.token_urlsafe(32)
        with self.db.session() as s:
            row = s.scalar(select(ApiTokenRow).where(ApiTokenRow.name == name))
            if row is not None and row.revoked_at is None:
                raise ValueError(f"an active token named {name!r} exists; revoke it first")
            if row is None:
                row = ApiTokenRow(name=name)
                s.add(row)
            row.token_hash = _token_hash(plaintext)
            row.scopes = list(scopes)
            row.created_at = utcnow()
            row.revoked_at = None
            row.expires_at = expires_at
        return plaintext

    def verify_token(self, plaintext: str, scope: str | None = None) -> bool:
        """True for an active token (allowing ``scope`` when one is asked for)."""
        return self.token_name(plaintext, scope) is not None

    def token_principal(self, plaintext: str) -> Principal | None:
        """The active, unexpired token ``plaintext`` as a :class:`Principal`, or None; one
        indexed read on a plain connection (it runs on every write request)."""
        if not plaintext:
            return None
        with self.db.read_one() as conn:  # one statement: one round trip
            row = conn.execute(_active_by_hash(), {"hash": _token_hash(plaintext)}).first()
        if row is None or _expired(row.expires_at):
            return None
        return Principal(int(row.id), str(row.name), effective_scope(row.scopes))

    def token_expiry(self, plaintext: str) -> datetime | None:
        """When the active token ``plaintext`` expired, if it has (None for an unknown,
        revoked or unexpired one): a refused request then says why (401, not 403), read only
        on that path."""
        if not plaintext:
            return None
        with self.db.read_one() as conn:
            row = conn.execute(_active_by_hash(), {"hash": _token_hash(plaintext)}).first()
        if row is None or not _expired(row.expires_at):
            return None
        at = row.expires_at
        return datetime.fromisoformat(at) if isinstance(at, str) else at

    def token_name(self, plaintext: str, scope: str | None = None) -> str | None:
        """The name of the active token ``plaintext`` (allowing ``scope`` if one is asked for),
        or None."""
        who = self.token_principal(plaintext)
        if who is None or (scope is not None and not who.allows(scope)):
            return None
        return who.name

    def revoke_token(self, name: str) -> bool:
        """Revoke the active token named ``name``; False if there was none."""
        with self.db.session() as s:
            res = s.execute(
                update(ApiTokenRow)
                .where(ApiTokenRow.name == name, ApiTokenRow.revoked_at.is_(None))
                .values(revoked_at=utcnow())
            )
            return res.rowcount == 1

    def list_tokens(self) -> list[TokenRecord]:
        """Token names, scopes and times (never hashes)."""
        with self.db.session(readonly=True) as s:
            return [
                {
                    "name": r.name,
                    "scopes": r.scopes or [],
                    "scope": effective_scope(r.scopes),
                    "created_at": _iso(r.created_at),
                    "revoked_at": _iso(r.revoked_at),
                    "expires_at": _iso(r.expires_at),
                }
                for r in s.scalars(select(ApiTokenRow).order_by(ApiTokenRow.name))
            ]
