"""API tokens: created and revoked from the CLI (``normfree token ...``), checked per request
(``ServiceState.principal``). Storage keeps only their hashes, with a scope (read < write <
admin) and an optional expiry."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from normfree.storage.protocols import TokenStore
from normfree.storage.tokens import scope_level

log = logging.getLogger(__name__)


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
MAX_EXPIRY = timedelta(days=36_500)


def parse_expiry(text: str, now: datetime | None = None) -> datetime:
    """When a token given ``--expires TEXT`` expires: a duration from now (``30s``, ``90m``,
    ``12h``, ``30d``, ``2w``) or a date or time (``2027-01-31``, ``2027-01-31T12:00``; UTC unless it
    says otherwise). ValueError for anything else, a time not in the future, or one more than
    100 years away."""
    now = now or datetime.now(UTC)
    raw = text.strip()
    unit = _UNITS.get(raw[-1:].lower())
    at: datetime | None = None
    if unit is not None:
        try:
            at = now + timedelta(seconds=float(raw[:-1]) * unit)
        except (ValueError, OverflowError):
            at = None
    if at is None:
        try:
            at = datetime.fromisoformat(raw)
        except ValueError:
            raise ValueError(
                f"--expires {text[:40]!r}: give a duration (90m, 12h, 30d, 2w) or a date "
                "(2027-01-31, 2027-01-31T12:00)"
            ) from None
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
    if not now < at <= now + MAX_EXPIRY:
        raise ValueError(f"--expires {text[:40]!r}: the expiry is in the next 100 years")
    return at


def create_token(
    repo: TokenStore,
    name: str,
    *,
    scope: str = "write",
    expires_days: float | None = None,
    expires: str | None = None,
) -> str:
    """A new token's plaintext (storage keeps only its hash). ``expires`` (see
    :func:`parse_expiry`) or ``expires_days``: when it is refused (401) from; neither: never.
    ValueError on a bad name, scope or expiry."""
    if not name or len(name) > 200 or not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError("a token name is 1-200 letters, digits, '-' or '_'")
    scope_level(scope)
    if expires is not None and expires_days is not None:
        raise ValueError("give --expires or --expires-days, not both")
    expires_at = parse_expiry(expires) if expires is not None else None
    if expires_days is not None:
        if not 0 < expires_days <= 36_500:
            raise ValueError("--expires-days is more than 0 and at most 36500")
        expires_at = datetime.now(UTC) + timedelta(days=expires_days)
    return repo.create_token(name, [scope], expires_at=expires_at)


def revoke_token(repo: TokenStore, name: str) -> bool:
    return bool(repo.revoke_token(name))


def list_tokens(repo: TokenStore) -> list[dict[str, Any]]:
    return list(repo.list_tokens())
