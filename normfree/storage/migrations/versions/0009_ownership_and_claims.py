"""Ownership and atomic claims (issue 28, points 3 and 4).

- ``studies.owner_token_id`` and ``reference_sets.owner_token_id``: the token that created the
  row (only it or an admin token may control, replace or delete it). NULL for rows made before
  this revision or by the CLI: those only an admin token may change through the API.
- ``api_tokens.expires_at``: an optional expiry (NULL: none).
- ``candidates.canonical_key``: SHA-256 of the canonical form, unique, so two submissions of one
  function under different names cannot both be stored (the second insert fails). Backfilled
  for the oldest row of each canonical form; later duplicates (stored by the old race) keep NULL.
- Tokens with no scope get ``["write"]`` (scopes are read < write < admin).

Plain ALTERs and a unique index: no batch mode (see 0005: it would cascade-delete children on
SQLite).
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from alembic import op

from normfree.storage.migrations.columns import JSON, TS

revision = "0009"
down_revision = "0008"


def upgrade() -> None:
    op.add_column("studies", sa.Column("owner_token_id", sa.Integer(), nullable=True))
    op.create_index("ix_studies_owner_token_id", "studies", ["owner_token_id"])
    op.add_column("reference_sets", sa.Column("owner_token_id", sa.Integer(), nullable=True))
    op.add_column("api_tokens", sa.Column("expires_at", TS, nullable=True))
    op.add_column("candidates", sa.Column("canonical_key", sa.String(64), nullable=True))
    conn = op.get_bind()
    cands = sa.table(
        "candidates", sa.column("id", sa.Integer), sa.column("canonical", sa.Text),
        sa.column("canonical_key", sa.String),
    )
    seen: set[str] = set()
    for cid, canonical in conn.execute(
        sa.select(cands.c.id, cands.c.canonical)
        .where(cands.c.canonical.is_not(None))
        .order_by(cands.c.id)
    ):
        key = hashlib.sha256(str(canonical).encode("utf-8")).hexdigest()
        if key in seen:
            continue
        seen.add(key)
        conn.execute(cands.update().where(cands.c.id == cid).values(canonical_key=key))
    op.create_index(
        "ix_candidates_canonical_key", "candidates", ["canonical_key"], unique=True
    )
    tokens = sa.table("api_tokens", sa.column("id", sa.Integer), sa.column("scopes", JSON))
    for tid, scopes in conn.execute(sa.select(tokens.c.id, tokens.c.scopes)):
        if not scopes:
            conn.execute(tokens.update().where(tokens.c.id == tid).values(scopes=["write"]))


def downgrade() -> None:
    op.drop_index("ix_candidates_canonical_key", table_name="candidates")
    op.drop_column("candidates", "canonical_key")
    op.drop_column("api_tokens", "expires_at")
    op.drop_column("reference_sets", "owner_token_id")
    op.drop_index("ix_studies_owner_token_id", table_name="studies")
    op.drop_column("studies", "owner_token_id")
