"""arm_results and read_versions (issue 15: reads that stay fast at 100k trials); candidates.prescreen.

- ``arm_results``: one row per (proxy, arm) summarising its finished trials, kept by the
  transaction that finishes a trial (``storage.aggregates``). Backfilled here from the trials
  already stored, so an upgraded database ranks exactly as before.
- ``read_versions``: a counter per cached read scope (``proxy:<name>``, ``candidates``), for the
  API's response cache and ETags.
- ``candidates.prescreen``: the submission prescreen's status and result, written after the
  answer by whichever API process ran it.
"""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from alembic import op

from normfree.storage.migrations.columns import JSON, TS

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    op.create_table(
        "arm_results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("proxy", sa.String(100), nullable=False),
        sa.Column("arm_key", sa.String(64), nullable=False),
        sa.Column("context_key", sa.String(64), nullable=False),
        sa.Column("candidate", sa.String(200), nullable=False),
        sa.Column("first_order", sa.String(40), nullable=False),
        sa.Column("norm", JSON, nullable=False),
        sa.Column("axis_values", JSON, nullable=False),
        sa.Column("overrides", JSON, nullable=False),
        sa.Column("objective", sa.String(100), nullable=True),
        sa.Column("objective_order", sa.String(40), nullable=True),
        sa.Column("direction", sa.String(10), nullable=True),
        sa.Column("direction_order", sa.String(40), nullable=True),
        sa.Column("n_trials", sa.Integer(), nullable=False),
        sa.Column("n_diverged", sa.Integer(), nullable=False),
        sa.Column("n_failed", sa.Integer(), nullable=False),
        sa.Column("n_pruned", sa.Integer(), nullable=False),
        sa.Column("seeds", JSON, nullable=False),
        sa.Column("study_ids", JSON, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_arm_results"),
        sa.UniqueConstraint("proxy", "arm_key", name="uq_arm_results_proxy_arm_key"),
    )
    op.create_index("ix_arm_results_context", "arm_results", ["proxy", "context_key"])
    op.create_table(
        "read_versions",
        sa.Column("scope", sa.String(250), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("scope", name="pk_read_versions"),
    )
    # Plain ALTER (see 0005): a batch copy of candidates would be harmless, but this is enough.
    op.add_column("candidates", sa.Column("prescreen", JSON, nullable=True))

    # The database's identity in the API's ETags: a tag from one database never matches another.
    op.execute(
        sa.text("INSERT INTO read_versions (scope, version) VALUES ('database', :v)").bindparams(
            v=secrets.randbits(62)
        )
    )
    from normfree.storage.aggregates import rebuild

    rebuild(op.get_bind(), archives=False)  # no archives before 0010


def downgrade() -> None:
    op.drop_column("candidates", "prescreen")
    op.drop_table("read_versions")
    op.drop_index("ix_arm_results_context", table_name="arm_results")
    op.drop_table("arm_results")
