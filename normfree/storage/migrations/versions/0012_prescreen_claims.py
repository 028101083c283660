"""Prescreen claims and canonical keys for every row (issue 28, point 4).

- ``candidates.prescreen_claimed_by`` / ``prescreen_claimed_at``: the server process that runs a
  stored candidate's pending prescreen, and since when. Every process of ``serve --workers N``
  re-queues interrupted prescreens at start; the claim (one conditional UPDATE) lets exactly one
  of them run each, and a claim older than its lease (a crashed claimant) may be taken again.
- ``candidates.canonical_key`` backfilled for rows stored without one (catalog and generate
  rows were upserted without it before this revision), so the unique key catches a submission
  of their function under another name. A key another row already holds stays NULL there.

Plain ALTERs: no batch mode (see 0005: it would cascade-delete children on SQLite).
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from alembic import op

from normfree.storage.migrations.columns import TS

revision = "0012"
down_revision = "0011"


def upgrade() -> None:
    op.add_column("candidates", sa.Column("prescreen_claimed_by", sa.String(200), nullable=True))
    op.add_column("candidates", sa.Column("prescreen_claimed_at", TS, nullable=True))
    conn = op.get_bind()
    cands = sa.table(
        "candidates",
        sa.column("id", sa.Integer),
        sa.column("canonical", sa.Text),
        sa.column("canonical_key", sa.String),
    )
    held = {
        str(k)
        for (k,) in conn.execute(
            sa.select(cands.c.canonical_key).where(cands.c.canonical_key.is_not(None))
        )
    }
    for cid, canonical in conn.execute(
        sa.select(cands.c.id, cands.c.canonical)
        .where(cands.c.canonical.is_not(None), cands.c.canonical_key.is_(None))
        .order_by(cands.c.id)
    ).all():
        key = hashlib.sha256(str(canonical).encode("utf-8")).hexdigest()
        if key in held:
            continue
        held.add(key)
        conn.execute(cands.update().where(cands.c.id == cid).values(canonical_key=key))


def downgrade() -> None:
    op.drop_column("candidates", "prescreen_claimed_at")
    op.drop_column("candidates", "prescreen_claimed_by")
