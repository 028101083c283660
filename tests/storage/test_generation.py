"""Commit notices on PostgreSQL (migration 0014): every table sends one, for commits only."""

from __future__ import annotations

import time

import psycopg
import pytest
from sqlalchemy import text

from normfree.storage import Database
from normfree.storage.async_reads import conninfo
from normfree.storage.generation import CHANNEL, tables_without_notice

pytestmark = pytest.mark.postgres


def _notices(listener: psycopg.Connection, within_s: float = 2.0) -> int:
    """Notices on ``CHANNEL`` that arrive within ``within_s`` (0 if none)."""
    got = 0
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        for n in listener.notifies(timeout=0.1):
            assert n.channel == CHANNEL
            got += 1
        if got:
            # one commit, however many statements: nothing else may follow
            for _ in listener.notifies(timeout=0.2):
                got += 1
            return got
    return got


def test_every_table_notifies_once_per_commit_and_never_for_a_rollback(
    postgres_database_url: str,
) -> None:
    db = Database(postgres_database_url)
    try:
        db.migrate()
        with db.engine.connect() as conn:
            # a table added by a later revision without its trigger fails here
            assert tables_without_notice(conn) == []
        listener = psycopg.connect(autocommit=True, **conninfo(db.url))
        try:
            listener.execute(f"LISTEN {CHANNEL}")
            with db.engine.begin() as conn:  # two statements on two tables: one notice
                conn.execute(
                    text(
                        "INSERT INTO reference_sets (name, title, source, description, builtin, "
                        "created_at) VALUES ('r', '', '', '', false, now())"
                    )
                )
                conn.execute(text("UPDATE reference_sets SET description = 'd'"))
            assert _notices(listener) == 1
            with db.engine.connect() as conn:  # a read is not a commit
                conn.execute(text("SELECT count(*) FROM trials")).all()
                conn.commit()
            with db.engine.connect() as conn:  # nor is a write rolled back
                conn.execute(text("DELETE FROM reference_sets"))
                conn.rollback()
            assert _notices(listener, within_s=0.5) == 0
            with db.engine.begin() as conn:
                conn.execute(text("DELETE FROM reference_sets"))
            assert _notices(listener) == 1
        finally:
            listener.close()
        with db.engine.begin() as conn:  # and the downgrade takes them away
            from alembic import command

            command.downgrade(db.alembic_config(conn), "0013")
        with db.engine.connect() as conn:
            assert "trials" in tables_without_notice(conn)
    finally:
        db.dispose()
