"""trials.document: a finished trial's detail, stored once (issue 15: reads at scale).

Trials finished before this revision get NULL: their detail is built from their rows when read,
as before. No backfill: it would rewrite every trial for a read that costs the same as today.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    # a plain ALTER (see 0005: batch mode would cascade-delete every trial's children on SQLite)
    op.add_column("trials", sa.Column("document", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("trials", "document")
