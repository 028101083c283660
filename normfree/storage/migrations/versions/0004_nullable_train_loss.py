"""trial_metrics.train_loss nullable: a non-finite (diverged) loss is stored as NULL.

Up to 0003 the column was NOT NULL, and SQLite turns a NaN into NULL, so a diverging trial's
NaN epoch could not be recorded. From here on every float column stores NaN/inf as NULL
(``models.FiniteFloat``), the same on every backend and representable in JSON.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    with op.batch_alter_table("trial_metrics") as batch:
        batch.alter_column("train_loss", existing_type=sa.Float(), nullable=True)


def downgrade() -> None:
    # Back to NOT NULL: a missing (non-finite) loss becomes +inf, which 0003's schema can hold.
    inf = "'Infinity'::float8" if op.get_bind().dialect.name == "postgresql" else "9e999"
    op.execute(f"UPDATE trial_metrics SET train_loss = {inf} WHERE train_loss IS NULL")
    with op.batch_alter_table("trial_metrics") as batch:
        batch.alter_column("train_loss", existing_type=sa.Float(), nullable=False)
