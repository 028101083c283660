"""The names behind PostgreSQL's commit notices (migration 0014), in one place.

Every normfree table carries a statement-level trigger that notifies :data:`CHANNEL` on commit;
a server's fast lane counts those notices as its database generation
(``api.fastlane.PostgresNotifyGeneration``). A revision that adds a table adds the trigger with
:func:`trigger_sql`. These names are part of the schema (migration 0014 creates them): never
rename one without a revision that renames it in the database.
"""

from __future__ import annotations

from typing import Any

CHANNEL = "normfree_generation"
TRIGGER = "normfree_generation"
FUNCTION = "normfree_generation_notify"


def trigger_sql(table: str) -> str:
    """The statement that makes commits writing ``table`` notify :data:`CHANNEL`."""
    return (
        f'CREATE TRIGGER {TRIGGER} AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "{table}" '
        f"FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()"
    )


# The tables (of the connection's schema, Alembic's own excepted) that a commit can write without
# notifying; none on a database migrated to head. Plain SQL (no parameters) so that the sync
# storage layer and the lane's async psycopg connection run the same text.
MISSING_SQL = (
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE c.relkind IN ('r', 'p') AND n.nspname = current_schema() "
    "AND c.relname <> 'alembic_version' AND NOT EXISTS (SELECT 1 FROM pg_trigger t "
    f"WHERE t.tgrelid = c.oid AND t.tgname = '{TRIGGER}') ORDER BY c.relname"
)


def tables_without_notice(conn: Any) -> list[str]:
    """:data:`MISSING_SQL` on a SQLAlchemy connection."""
    from sqlalchemy import text

    return [r[0] for r in conn.execute(text(MISSING_SQL)).all()]
