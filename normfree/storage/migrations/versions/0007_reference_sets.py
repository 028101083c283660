"""Reference sets (published at-scale results) and trials.failure (issue 14: fidelity).

``reference_sets`` / ``reference_rows`` hold the results a proxy's ranking is compared with;
``trials.failure`` says why a DIVERGED trial failed to train (non-finite loss, a blow-up, or an
end near the untrained level). Existing trials get NULL: their reason was not recorded.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    # a plain ALTER (see 0005: batch mode would cascade-delete every trial's children on SQLite)
    op.add_column("trials", sa.Column("failure", sa.String(length=300), nullable=True))
    op.create_table(
        "reference_sets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("title", sa.String(length=300), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("builtin", sa.Boolean(), nullable=False),
        sa.Column("submitter", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reference_sets")),
        sa.UniqueConstraint("name", name=op.f("uq_reference_sets_name")),
    )
    op.create_table(
        "reference_rows",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("set_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("setting", sa.String(length=200), nullable=False),
        sa.Column("family", sa.String(length=10), nullable=False),
        sa.Column("metric", sa.String(length=20), nullable=False),
        sa.Column("direction", sa.String(length=10), nullable=False),
        sa.Column("resolution", sa.Float(), nullable=False),
        sa.Column("function", sa.String(length=300), nullable=False),
        sa.Column("shift", sa.String(length=10), nullable=False),
        sa.Column("alpha", sa.Float(), nullable=True),
        sa.Column("cell_key", sa.String(length=200), nullable=False),
        sa.Column("value_low", sa.Float(), nullable=True),
        sa.Column("value_high", sa.Float(), nullable=True),
        sa.Column("failed", sa.Boolean(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["set_id"],
            ["reference_sets.id"],
            name=op.f("fk_reference_rows_set_id_reference_sets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reference_rows")),
        sa.UniqueConstraint(
            "set_id", "setting", "cell_key", name=op.f("uq_reference_rows_set_id_setting_cell_key")
        ),
    )


def downgrade() -> None:
    op.drop_table("reference_rows")
    op.drop_table("reference_sets")
    op.drop_column("trials", "failure")
