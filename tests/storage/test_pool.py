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


@pytest.mark.postgres
def test_async_trial_documents_read_what_the_sync_read_reads(postgres_database_url: str) -> None:
    """storage.async_reads: the same (found, document) as reads.stored_trial_detail for a
    finished, a running and a missing trial; a connection the server dropped fails one read
    (the caller then reads the usual way) and the next read opens another."""
    import asyncio

    from normfree.specs import NormSpec, StudySpec, TrialConfig, TrialResult
    from normfree.storage import Repository, reads
    from normfree.storage.async_reads import AsyncTrialDocuments

    db = Database(postgres_database_url)
    db.migrate()
    repo = Repository(db)
    sid = repo.create_study(StudySpec(kind="options", proxy="vit-tiny", name="async"))
    items = [TrialConfig(proxy="vit-tiny", norm=NormSpec(name="erf"), seed=s) for s in (0, 1)]
    done, running = repo.add_trials(sid, items)
    lease = repo.lease_next(sid, "w", 60)
    assert lease is not None and lease.id == done
    result = TrialResult(status="complete", objective="val_acc", metrics={"val_acc": 0.8})
    assert repo.finish_trial(done, "w", lease.attempt, result)
    assert repo.lease_next(sid, "w", 60) is not None  # the other one runs

    async def scenario() -> list[Any]:
        docs = AsyncTrialDocuments(postgres_database_url, size=2)
        try:
            out = [await docs.stored_trial_detail(t) for t in (done, running, 999_999)]
            pid = (await (await docs._idle[0].execute("SELECT pg_backend_pid()")).fetchone())[0]
            killer = create_engine(postgres_database_url, isolation_level="AUTOCOMMIT")
            with killer.connect() as conn:
                conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
            killer.dispose()
            with pytest.raises(Exception):  # noqa: B017  (whatever the driver raises)
                await docs.stored_trial_detail(done)
            out.append(await docs.stored_trial_detail(done))
            return out
        finally:
            await docs.aclose()

    finished, still_running, missing, again = asyncio.run(scenario())
    with db.read() as conn:
        assert finished == reads.stored_trial_detail(conn, done)
        assert finished[0] and finished[1] == reads.build_trial_detail(conn, done)
    assert still_running == (True, None) and missing == (False, None)
    assert again == finished
    db.dispose()


@pytest.mark.postgres
def test_async_trial_documents_send_reads_that_wait_together(postgres_database_url: str) -> None:
    """Reads arriving together go out as fewer statements than reads, and each gets its own
    trial's answer (a repeated id, a missing one, and the trial's document)."""
    import asyncio

    from normfree.specs import NormSpec, StudySpec, TrialConfig, TrialResult
    from normfree.storage import Repository, reads
    from normfree.storage.async_reads import AsyncTrialDocuments

    db = Database(postgres_database_url)
    db.migrate()
    repo = Repository(db)
    sid = repo.create_study(StudySpec(kind="options", proxy="vit-tiny", name="batch"))
    items = [TrialConfig(proxy="vit-tiny", norm=NormSpec(name="erf"), seed=s) for s in range(6)]
    ids = repo.add_trials(sid, items)
    for k in range(len(ids)):
        lease = repo.lease_next(sid, "w", 60)
        assert lease is not None
        metrics = {"val_acc": 0.5 + k / 100}
        result = TrialResult(status="complete", objective="val_acc", metrics=metrics)
        assert repo.finish_trial(lease.id, "w", lease.attempt, result)
    asked = [*ids, ids[0], 999_999] * 4

    async def scenario() -> tuple[list[Any], int]:
        docs = AsyncTrialDocuments(postgres_database_url, size=2)
        try:
            out = await asyncio.gather(*(docs.stored_trial_detail(t) for t in asked))
            return list(out), docs.statements
        finally:
            await docs.aclose()

    answers, statements = asyncio.run(scenario())
    assert statements < len(asked) // 4
    with db.read() as conn:
        expected = {t: reads.stored_trial_detail(conn, t) for t in set(asked)}
    assert answers == [expected[t] for t in asked]
    assert expected[999_999] == (False, None)
    assert all(expected[t][0] and expected[t][1] is not None for t in ids)
    db.dispose()
