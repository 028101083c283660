"""Alembic environment for normfree's own tables (Optuna's live in a separate database).

Run programmatically by ``Database.migrate()``, which hands over its connection in
``config.attributes["connection"]``; the ``alembic`` command line also works with
``-x url=...`` or ``sqlalchemy.url`` set in a config file.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from normfree.storage.models import Base

config = context.config
target_metadata = Base.metadata

# Two processes starting at once must not both create the schema: PostgreSQL serialises on an
# advisory lock; SQLite on the write lock its BEGIN IMMEDIATE takes (see storage/db.py).
_PG_MIGRATION_LOCK = 0x6E6F726D  # "norm"


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite ALTERs need batch mode
        compare_type=True,
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_MIGRATION_LOCK})")
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    from normfree.storage.db import Database

    db = Database(url)
    try:
        with db.engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        db.dispose()


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
