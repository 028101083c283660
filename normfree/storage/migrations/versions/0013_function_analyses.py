"""Function analyses kept across restarts (issue 27, point 1).

``function_analyses``: a leaderboard arm's group and properties (``search_space.catalog.describe``)
per catalog code version. A server analysed every arm's function again after each start (tens of
seconds of sympy for a property study's arms) and every finished analysis moved the boards'
cache keys, so the first minute after a start answered slower and further behind.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from normfree.storage.migrations.columns import TS

revision = "0013"
down_revision = "0012"


def upgrade() -> None:
    op.create_table(
        "function_analyses",
        sa.Column("version", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("info", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("version", "name", name=op.f("pk_function_analyses")),
    )


def downgrade() -> None:
    op.drop_table("function_analyses")
