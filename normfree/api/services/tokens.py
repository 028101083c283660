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


def create_token(
    repo: TokenStore, name: str, *, scope: str = "write", expires_days: float | None = None
) -> str:
    """A new token's plaintext (storage keeps only its hash). ValueError on a bad name, scope
    or expiry."""
    if not name or len(name) > 200 or not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError("a token name is 1-200 letters, digits, '-' or '_'")
    scope_level(scope)
    expires_at = None
    if expires_days is not None:
        if not 0 < expires_days <= 36_500:
            raise ValueError("--expires-days is more than 0 and at most 36500")
        expires_at = datetime.now(UTC) + timedelta(days=expires_days)
    return repo.create_token(name, [scope], expires_at=expires_at)


def revoke_token(repo: TokenStore, name: str) -> bool:
    return bool(repo.revoke_token(name))


def list_tokens(repo: TokenStore) -> list[dict[str, Any]]:
    return list(repo.list_tokens())
