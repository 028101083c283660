"""API write tokens, stored as hashes.

Part of :class:`normfree.storage.Repository` (see ``storage/repository.py`` for the guarantees).
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Sequence
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


@functools.cache
def _active_by_hash() -> Any:
    """The active token with a hash (built once: every write request asks it)."""
    t = ApiTokenRow.__table__
    return select(t.c.name, t.c.scopes).where(
        t.c.token_hash == bindparam("hash"), t.c.revoked_at.is_(None)
    )


class TokenRepository(RepositoryBase):
    """API write tokens, stored as hashes."""

    # -- API tokens --------------------------------------------------------------------------

    def create_token(self, name: str, scopes: Sequence[str] = ("write",)) -> str:
        """Create a token and return its plaintext (shown once; only its SHA-256 is stored).

        A revoked token's name may be reused; an active one raises ValueError.
        """
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
        return plaintext

    def verify_token(self, plaintext: str, scope: str | None = None) -> bool:
        """True for an active token (holding ``scope`` when one is asked for)."""
        if not plaintext:
            return False
        with self.db.session(readonly=True) as s:
            row = s.scalar(
                select(ApiTokenRow).where(
                    ApiTokenRow.token_hash == _token_hash(plaintext),
                    ApiTokenRow.revoked_at.is_(None),
                )
            )
            return row is not None and (scope is None or scope in (row.scopes or []))

    def token_name(self, plaintext: str, scope: str | None = None) -> str | None:
        """The name of the active token ``plaintext`` (holding ``scope`` if one is asked for),
        or None; one indexed read on a plain connection (it runs on every write request)."""
        if not plaintext:
            return None
        with self.db.read_one() as conn:  # one statement: one round trip
            row = conn.execute(_active_by_hash(), {"hash": _token_hash(plaintext)}).first()
        if row is None or (scope is not None and scope not in (row.scopes or [])):
            return None
        return str(row.name)

    def revoke_token(self, name: str) -> bool:
        """Revoke the active token named ``name``; False if there was none."""
        with self.db.session() as s:
            res = s.execute(
                update(ApiTokenRow)
                .where(ApiTokenRow.name == name, ApiTokenRow.revoked_at.is_(None))
                .values(revoked_at=utcnow())
            )
            return res.rowcount == 1

    def list_tokens(self) -> list[dict[str, Any]]:
        """Token names, scopes and times (never hashes)."""
        with self.db.session(readonly=True) as s:
            return [
                {
                    "name": r.name,
                    "scopes": r.scopes or [],
                    "created_at": _iso(r.created_at),
                    "revoked_at": _iso(r.revoked_at),
                }
                for r in s.scalars(select(ApiTokenRow).order_by(ApiTokenRow.name))
            ]
