"""Write tokens: created and revoked from the CLI (``normfree serve token ...``), checked per
write request (``ServiceState.verify_token``). Storage keeps only their hashes."""

from __future__ import annotations

import logging
from typing import Any

from normfree.storage.protocols import TokenStore

log = logging.getLogger(__name__)


def create_token(repo: TokenStore, name: str) -> str:
    """A new write token's plaintext (storage keeps only its hash). ValueError on a bad name."""
    if not name or len(name) > 200 or not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError("a token name is 1-200 letters, digits, '-' or '_'")
    return repo.create_token(name)


def revoke_token(repo: TokenStore, name: str) -> bool:
    return bool(repo.revoke_token(name))


def list_tokens(repo: TokenStore) -> list[dict[str, Any]]:
    return list(repo.list_tokens())
