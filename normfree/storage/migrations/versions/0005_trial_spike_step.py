"""trials.spike_step: the training step where the loss first spiked (issue 9 diagnostics).

``TrialResult.spike_step`` says why a run failed (or nearly did) but was dropped on the way into
the database; a nullable integer beside ``diverged_at_step`` keeps it. Existing rows get NULL:
no spike was recorded for them, which is what NULL means for a new row too.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


# Plain ALTERs, not batch mode: SQLite (>= 3.35) adds and drops an unindexed column in place,
# while a batch "move and copy" of ``trials`` drops the old table, and with foreign keys on
# (storage/db.py) that cascades and deletes every curve and diagnostics row of every trial.


def upgrade() -> None:
    op.add_column("trials", sa.Column("spike_step", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("trials", "spike_step")
