"""Query indexes (leaderboard, study progress, leasing, pairing) and the api_tokens table.

0001 only had the keys; the leaderboard and the lease queries scanned the trials table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from normfree.storage.migrations.columns import JSON, TS

revision = "0002"
down_revision = "0001"

INDEXES = (
    ("ix_candidates_fingerprint", "candidates", ["fingerprint"]),
    ("ix_candidates_group", "candidates", ["group"]),
    ("ix_trials_leaderboard", "trials", ["proxy", "status", "candidate"]),
    ("ix_trials_study_status", "trials", ["study_id", "status"]),
    ("ix_trials_lease", "trials", ["status", "lease_expires_at"]),
    ("ix_trials_context_seed", "trials", ["context_key", "seed"]),
)


def upgrade() -> None:
    for name, table, columns in INDEXES:
        op.create_index(name, table, columns)
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("scopes", JSON, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("revoked_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_tokens"),
        sa.UniqueConstraint("name", name="uq_api_tokens_name"),
        sa.UniqueConstraint("token_hash", name="uq_api_tokens_token_hash"),
    )


def downgrade() -> None:
    op.drop_table("api_tokens")
    for name, table, _columns in reversed(INDEXES):
        op.drop_index(name, table_name=table)
