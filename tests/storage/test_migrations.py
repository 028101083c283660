"""Alembic owns the schema: migrations match the models, old files upgrade, Optuna lives beside."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from normfree.settings import Settings
from normfree.storage import Database, Repository, optuna_storage_url
from normfree.storage.candidates import canonical_key
from normfree.storage.models import Base

V1_FILE = Path(__file__).parent / "data" / "normfree_v1.db"
HEAD = "0014"  # the newest revision


def head(db: Database) -> str:
    return ScriptDirectory.from_config(db.alembic_config()).get_current_head()  # type: ignore[return-value]


def _query_indexes(insp: object, table: str) -> set[str]:
    # PostgreSQL also lists the indexes behind unique constraints (uq_*); count ours only.
    return {i["name"] for i in insp.get_indexes(table) if i["name"].startswith("ix_")}  # type: ignore[attr-defined]


def _nullable(insp: Any, table: str, column: str) -> bool:
    return next(c["nullable"] for c in insp.get_columns(table) if c["name"] == column)


def _downgrade(db: Database, revision: str) -> Any:
    """Run the downgrades to ``revision``; an inspector of the schema they leave."""
    with db.engine.begin() as conn:
        command.downgrade(db.alembic_config(conn), revision)
    return inspect(db.engine)


@contextmanager
def _opened(url: str) -> Iterator[Database]:
    """A Database on ``url`` that the test migrates itself, disposed after it."""
    db = Database(url)
    try:
        yield db
    finally:
        db.dispose()


def _back_and_forth(
    db: Database, revision: str, tables: tuple[str, ...] = (), **gone: tuple[str, ...]
) -> None:
    """Downgrade to ``revision``, where the ``tables`` and each table's ``gone`` columns are
    gone, then upgrade to the head again."""
    insp = _downgrade(db, revision)
    assert not set(tables) & set(insp.get_table_names()), tables
    for table, columns in gone.items():
        assert not set(columns) & {c["name"] for c in insp.get_columns(table)}, (table, columns)
    db.migrate()
    assert db.current_revision() == HEAD


def test_migrated_schema_matches_models(db: Database) -> None:
    """Autogenerate finds nothing to do: models.py and migrations/versions agree (no drift)."""
    assert db.current_revision() == head(db) == HEAD
    with db.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(ctx, Base.metadata) == []


def test_migrate_is_idempotent(db: Database) -> None:
    db.migrate()
    db.migrate()
    assert db.current_revision() == HEAD


def test_revisions_add_what_they_say(database_url: str) -> None:
    """0001: tables and keys; 0002: indexes, api_tokens; 0003: releases; 0004: NULL losses;
    0005: spike_step; 0006: arm_results, read_versions, candidates.prescreen (and back);
    0007: reference sets, trials.failure (and back)."""
    with _opened(database_url) as db:
        db.migrate("0001")
        insp = inspect(db.engine)
        assert "api_tokens" not in insp.get_table_names()
        assert _query_indexes(insp, "trials") == set()
        db.migrate("0002")
        insp = inspect(db.engine)
        assert "api_tokens" in insp.get_table_names()
        assert "releases" not in {c["name"] for c in insp.get_columns("trials")}
        assert _query_indexes(insp, "trials") == {
            "ix_trials_leaderboard",
            "ix_trials_study_status",
            "ix_trials_lease",
            "ix_trials_context_seed",
        }
        db.migrate("0003")
        insp = inspect(db.engine)
        assert "releases" in {c["name"] for c in insp.get_columns("trials")}
        assert not _nullable(insp, "trial_metrics", "train_loss")
        db.migrate("0004")
        insp = inspect(db.engine)
        assert _nullable(insp, "trial_metrics", "train_loss")
        assert "spike_step" not in {c["name"] for c in insp.get_columns("trials")}
        db.migrate("0005")
        assert _nullable(inspect(db.engine), "trials", "spike_step")
        assert "arm_results" not in inspect(db.engine).get_table_names()
        db.migrate("0006")
        insp = inspect(db.engine)
        assert {"arm_results", "read_versions"} <= set(insp.get_table_names())
        assert _nullable(insp, "candidates", "prescreen")
        assert "reference_sets" not in insp.get_table_names()
        insp = _downgrade(db, "0005")
        assert "arm_results" not in insp.get_table_names()
        assert "prescreen" not in {c["name"] for c in insp.get_columns("candidates")}
        db.migrate()
        insp = inspect(db.engine)
        assert {"reference_sets", "reference_rows"} <= set(insp.get_table_names())
        assert _nullable(insp, "trials", "failure")
        _back_and_forth(db, "0006", ("reference_sets",), trials=("failure",))


def test_upgrade_old_database_file_keeps_rows(tmp_path: Path) -> None:
    path = tmp_path / "normfree.db"
    shutil.copy(V1_FILE, path)
    with _opened(f"sqlite:///{path}") as db:
        assert db.current_revision() == "0001"
        db.migrate()
        assert db.current_revision() == HEAD
        repo = Repository(db)
        cand = repo.get_candidate("erf")
        assert cand is not None
        assert (cand["properties"], cand["submitter"]) == (
            {"odd": True, "bounded": True},
            "catalog",
        )
        study = repo.get_study(1)
        assert study is not None
        assert (study["name"], study["status"]) == ("v1 study", "complete")
        trial = repo.get_trial(1)
        assert trial is not None
        assert (trial["status"], trial["value"], trial["candidate"]) == ("COMPLETE", 0.91, "erf")
        assert trial["spike_step"] is None  # 0005's column: NULL for rows written before it
        assert trial["failure"] is None  # 0006's
        assert trial["created_at"].startswith("2026-11-01T12:00:00")
        assert [c["val_loss"] for c in trial["curves"]] == [0.4]
        (row,) = repo.leaderboard("vit-digits")
        assert (row["candidate"], row["n"], row["mean"], row["group"]) == (
            "erf",
            1,
            0.91,
            "sigmoid",
        )
        # what 0002 added works on the upgraded file
        token = repo.create_token("upgraded")
        assert repo.verify_token(token)
    assert V1_FILE.read_bytes()[:16] == b"SQLite format 3\x00"  # the checked-in file is untouched


def test_sqlite_pragmas(sqlite_database_url: str) -> None:
    with _opened(sqlite_database_url) as db, db.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000


def test_optuna_storage_url_derivation() -> None:
    s = Settings(database_url="sqlite:///runs/normfree.db")
    assert optuna_storage_url(s) == "sqlite:///runs/normfree-optuna.db"
    s = Settings(database_url="sqlite:////abs/path/x.sqlite")
    assert optuna_storage_url(s) == "sqlite:////abs/path/x-optuna.sqlite"
    s = Settings(database_url="postgresql://u:pw@db.example:5432/normfree")
    assert optuna_storage_url(s) == "postgresql+psycopg://u:pw@db.example:5432/normfree_optuna"
    s = Settings(database_url="sqlite:///a.db", optuna_storage_url="sqlite:///elsewhere.db")
    assert optuna_storage_url(s) == "sqlite:///elsewhere.db"


def test_optuna_study_lives_beside_ours(db: Database) -> None:
    """Optuna's tables (also named studies/trials) go to the sibling storage; both work."""
    optuna = pytest.importorskip("optuna")
    from normfree.storage import drop_database, ensure_database

    url = optuna_storage_url(Settings(database_url=db.url))
    assert url != db.url
    created = ensure_database(url)
    try:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        st = optuna.create_study(study_name="normfree-study-1", storage=url)
        st.optimize(lambda t: t.suggest_float("x", -1, 1) ** 2, n_trials=2)
        assert len(optuna.load_study(study_name="normfree-study-1", storage=url).trials) == 2
        # our schema is untouched by Optuna's
        assert db.current_revision() == HEAD
        assert "trial_key" in {c["name"] for c in inspect(db.engine).get_columns("trials")}
    finally:
        if created:
            drop_database(url)


def test_downgrade_to_base_and_back(database_url: str) -> None:
    """Every revision's downgrade runs (with a NULL loss that 0004's downgrade must fill)."""
    from alembic import command

    from normfree.specs import EpochRecord, NormSpec, StudySpec, TrialConfig

    with _opened(database_url) as db:
        db.migrate()
        repo = Repository(db)
        sid = repo.create_study(StudySpec(kind="property", proxy="p"))
        (tid,) = repo.add_trials(sid, [TrialConfig(proxy="p", norm=NormSpec(name="erf"))])
        lease = repo.lease_next(sid, "w", 60)
        assert lease is not None
        nan_epoch = EpochRecord(epoch=0, step=1, train_loss=float("nan"), lr=0.1, wall_time_s=0)
        assert repo.record_epoch(tid, "w", lease.attempt, nan_epoch)
        with db.engine.connect() as conn:
            command.downgrade(db.alembic_config(conn), "0003")
            conn.commit()
            loss = conn.exec_driver_sql("SELECT train_loss FROM trial_metrics").scalar()
            assert loss == float("inf")
            command.downgrade(db.alembic_config(conn), "base")
            conn.commit()
        assert db.current_revision() is None
        assert "trials" not in inspect(db.engine).get_table_names()
        db.migrate()
        assert db.current_revision() == HEAD


def test_0009_backfills_canonical_keys_and_scopes(database_url: str) -> None:
    """0009: the oldest row of a canonical form gets the unique key (a later duplicate, stored by
    the old read-then-upsert race, keeps NULL); a token with no scope gets write."""
    with _opened(database_url) as db:
        db.migrate("0008")
        with db.engine.begin() as conn:
            for name in ("first", "second"):
                conn.exec_driver_sql(
                    "INSERT INTO candidates (name, canonical, properties, lineage, created_at) "
                    f"VALUES ('{name}', 'u/(1 + u**2)', '{{}}', '{{}}', '2026-11-01 12:00:00')"
                )
            conn.exec_driver_sql(
                "INSERT INTO api_tokens (name, token_hash, scopes, created_at) "
                "VALUES ('old', 'h', '[]', '2026-11-01 12:00:00')"
            )
        db.migrate()
        repo = Repository(db)
        with db.engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT name, canonical_key FROM candidates").all()
        keys = {name: key for name, key in rows}
        assert keys["first"] is not None and len(keys["first"]) == 64 and keys["second"] is None
        assert [t["scope"] for t in repo.list_tokens()] == ["write"]
        assert _nullable(inspect(db.engine), "studies", "owner_token_id")
        _back_and_forth(db, "0008", candidates=("canonical_key",))


def test_0010_adds_archives_tags_and_notes_and_goes_back(database_url: str) -> None:
    """0010: studies.archived_at, tags (an empty list for existing rows), note;
    trials.archived (false for existing rows); candidates.archived_at, owner_token_id."""
    with _opened(database_url) as db:
        db.migrate("0009")
        with db.engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO studies (kind, proxy, spec, status, created_at, updated_at) "
                "VALUES ('property', 'vit-tiny', '{}', 'complete', "
                "'2026-01-01 00:00:00', '2026-01-01 00:00:00')"
            )
        db.migrate("0010")
        insp = inspect(db.engine)
        assert {"archived_at", "tags", "note"} <= {c["name"] for c in insp.get_columns("studies")}
        assert "archived" in {c["name"] for c in insp.get_columns("trials")}
        assert {"archived_at", "owner_token_id"} <= {
            c["name"] for c in insp.get_columns("candidates")
        }
        study = Repository(db).get_study(1)
        assert study is not None and study["tags"] == [] and study["archived_at"] is None
        _back_and_forth(db, "0009", studies=("tags",), trials=("archived",))


def test_0012_backfills_upserted_keys_and_adds_prescreen_claims(database_url: str) -> None:
    """0012: a row upserted without a canonical key (the catalog and generate paths before it)
    gets one unless another row holds that function; the prescreen claim columns come and go."""
    with _opened(database_url) as db:
        db.migrate("0011")
        with db.engine.begin() as conn:
            for name, canonical in (("gen", "u/(3 + u**2)"), ("held", "u/(4 + u**2)")):
                conn.exec_driver_sql(
                    "INSERT INTO candidates (name, canonical, properties, lineage, created_at) "
                    f"VALUES ('{name}', '{canonical}', '{{}}', '{{}}', '2026-11-01 12:00:00')"
                )
            held_key = canonical_key("u/(4 + u**2)")
            conn.exec_driver_sql(  # a claimed row that already holds the second function
                "INSERT INTO candidates (name, canonical, canonical_key, properties, lineage, "
                f"created_at) VALUES ('claimed', 'u/(4 + u**2)', '{held_key}', '{{}}', '{{}}', "
                "'2026-11-01 12:00:00')"
            )
        db.migrate()
        with db.engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT name, canonical_key FROM candidates").all()
        keys = dict(rows)
        assert keys["gen"] is not None and len(keys["gen"]) == 64
        assert keys["claimed"] == held_key and keys["held"] is None
        columns = {c["name"] for c in inspect(db.engine).get_columns("candidates")}
        assert {"prescreen_claimed_by", "prescreen_claimed_at"} <= columns
        _back_and_forth(db, "0011", candidates=("prescreen_claimed_by",))
