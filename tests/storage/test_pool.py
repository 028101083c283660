"""The PostgreSQL pool pings a connection only after it sat idle (storage.db._ping_when_idle)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, text

from normfree.storage import Database
from normfree.storage import db as db_module


@pytest.mark.postgres
def test_a_connection_the_server_dropped_is_replaced_and_busy_ones_are_not_pinged(
    postgres_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = Database(postgres_database_url)
    pings: list[Any] = []
    real_ping = db.engine.dialect.do_ping

    def counted(conn: Any) -> bool:
        pings.append(conn)
        return real_ping(conn)

    monkeypatch.setattr(db.engine.dialect, "do_ping", counted)
    try:
        with db.read() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar()
        assert len(pings) == 1  # a new connection: pinged once
        for _ in range(5):  # in steady use: no round trip before each read
            with db.read_one() as conn:
                assert conn.execute(text("SELECT pg_backend_pid()")).scalar() == pid
        assert len(pings) == 1

        killer = create_engine(postgres_database_url, isolation_level="AUTOCOMMIT")
        with killer.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        killer.dispose()
        # the server dropped it while it sat in the pool; once it counts as idle, the ping
        # finds it gone and the pool lends a new one: the read succeeds
        monkeypatch.setattr(db_module, "PING_AFTER_IDLE_S", 0.0)
        with db.read() as conn:
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar() != pid
        assert len(pings) >= 2
    finally:
        db.dispose()
