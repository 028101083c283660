"""trials.releases: leases handed back without charging an attempt (a study paused under them).

``attempt`` stays monotonic, so it keeps working as the fencing token of a lease; retries are
bounded by ``attempt - releases``. Existing rows start at 0 (nothing was released before).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("releases", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("releases")
