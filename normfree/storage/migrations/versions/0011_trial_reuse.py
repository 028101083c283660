"""Reusing finished trials across studies (issue 25, point 6).

- ``trials.code_version``: the trainer's code version that produced a finished trial
  (``TrialResult.code_version``); NULL for trials finished before this revision, which are
  therefore never reused (nothing says which code trained them).
- ``trials.reused_from``: the id of the finished trial whose result this row carries (its
  study never trained it); NULL for a trial that ran. Not a foreign key: a copy keeps its
  meaning when the study it was copied from is deleted.
- ``ix_trials_reuse``: a study looks its planned trial keys up across every study.

Plain ALTERs and an index: no batch mode (see 0005: it would cascade-delete children on
SQLite).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"


def upgrade() -> None:
    op.add_column("trials", sa.Column("code_version", sa.String(64), nullable=True))
    op.add_column("trials", sa.Column("reused_from", sa.Integer(), nullable=True))
    op.create_index("ix_trials_reuse", "trials", ["trial_key", "code_version"])


def downgrade() -> None:
    op.drop_index("ix_trials_reuse", table_name="trials")
    op.drop_column("trials", "reused_from")
    op.drop_column("trials", "code_version")
