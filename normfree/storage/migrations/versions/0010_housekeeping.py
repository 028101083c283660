"""Housekeeping (issue 27, point 5): archives, tags and notes, candidate ownership.

- ``studies.archived_at``: set when a finished study is archived (NULL: shown). An archived
  study leaves lists and leaderboards by default but keeps every row, so it can be restored.
- ``studies.tags`` (a JSON list of short labels) and ``studies.note`` (free text): what a
  researcher writes about a run; the list filters by tag.
- ``trials.archived``: the trials of one arm of one study taken off the leaderboards (one bad
  arm need not stay there for ever). A flag per trial, not a table of archived arms, because the
  arm summaries (``storage.aggregates``) are folded from trial rows: the fold skips a flagged
  trial with no join.
- ``candidates.archived_at`` (hidden from the candidate list) and ``candidates.owner_token_id``
  (the token that submitted it: only it or an admin token may archive or delete it; NULL for
  catalog rows and rows older than this revision, which only an admin token may change).

Plain ALTERs, no batch mode (see 0005: a batch copy of ``trials`` would cascade-delete children
on SQLite).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from normfree.storage.migrations.columns import JSON, TS

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    op.add_column("studies", sa.Column("archived_at", TS, nullable=True))
    op.add_column("studies", sa.Column("tags", JSON, nullable=False, server_default="[]"))
    op.add_column("studies", sa.Column("note", sa.Text(), nullable=True))
    op.add_column(
        "trials",
        sa.Column("archived", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.add_column("candidates", sa.Column("archived_at", TS, nullable=True))
    op.add_column("candidates", sa.Column("owner_token_id", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("candidates", "owner_token_id")
    op.drop_column("candidates", "archived_at")
    op.drop_column("trials", "archived")
    op.drop_column("studies", "note")
    op.drop_column("studies", "tags")
    op.drop_column("studies", "archived_at")
