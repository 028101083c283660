"""A notice of every commit on PostgreSQL (issue 27, point 1).

Every table gets a statement-level trigger that calls ``pg_notify('normfree_generation', '')``.
PostgreSQL delivers a transaction's notices when it commits, once per channel and payload
however many statements wrote, and never for a transaction that rolled back or only read. A
server's fast lane LISTENs on the channel and counts the notices as its database generation
(``api.fastlane.PostgresNotifyGeneration``): a request then reads the generation from memory
instead of waiting for a ``pg_current_snapshot()`` round trip (bench/results/live_reads.md).

A table added by a later revision must get the same trigger (``storage.generation.
trigger_sql``); ``tests/storage/test_generation.py`` fails for a table without one. SQLite
needs none: its ``PRAGMA data_version`` is read in microseconds.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from normfree.storage.generation import CHANNEL, FUNCTION, TRIGGER, trigger_sql

revision = "0014"
down_revision = "0013"


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    op.execute(
        f"CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN PERFORM pg_notify('{CHANNEL}', ''); RETURN NULL; END $$"
    )
    for table in sa.inspect(bind).get_table_names():
        if table != "alembic_version":
            op.execute(trigger_sql(table))


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    for table in sa.inspect(bind).get_table_names():
        if table != "alembic_version":
            op.execute(f'DROP TRIGGER IF EXISTS {TRIGGER} ON "{table}"')
    op.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")
