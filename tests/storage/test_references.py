"""Reference sets in storage (SQLite and PostgreSQL): whole or nothing, and the fidelity inputs."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from normfree.fidelity.published import published
from normfree.fidelity.reference import Cell, ReferenceRow, ReferenceSet, build_set, cell_key
from normfree.specs import NormSpec, StudySpec, TrialConfig, TrialResult
from normfree.storage import Database, Repository
from normfree.storage.models import ReferenceEntryRow, ReferenceSetRow
from normfree.storage.references import ReferenceExists, ReferenceStore

ROW = {"setting": "S", "family": "vit", "metric": "accuracy", "direction": "maximize"}


def small(name: str = "mine", value: float = 82.0) -> ReferenceSet:
    return build_set(
        {
            "name": name,
            "source": "a paper",
            "rows": [
                {**ROW, "cell": {"function": "erf", "shift": "scalar"}, "value_low": value,
                 "value_high": value},
                {**ROW, "cell": {"function": "identity"}, "failed": True},
            ],
        }
    )  # fmt: skip


def _counts(db: Database) -> tuple[int, int]:
    with db.session(readonly=True) as s:
        return (
            s.scalar(select(func.count()).select_from(ReferenceSetRow)) or 0,
            s.scalar(select(func.count()).select_from(ReferenceEntryRow)) or 0,
        )


def test_import_round_trip(db: Database) -> None:
    store = ReferenceStore(db)
    out = store.put(small(), submitter="alice")
    assert out["n_rows"] == 2 and out["settings"] == ["S"] and out["submitter"] == "alice"
    assert store.get("mine") == small()
    store.ensure_builtin()
    assert store.get("published") == published()
    names = [r["name"] for r in store.list()]
    assert names == ["published", "mine"]  # built in first
    shown = store.describe("published")
    assert shown is not None and shown["builtin"] and len(shown["rows"]) == len(published().rows)


def test_a_failing_import_writes_nothing(db: Database) -> None:
    store = ReferenceStore(db)
    row = small().rows[0]
    # bypass validation: two rows of one cell in one setting reach the database, whose unique
    # constraint refuses the second; the set row written before it must go too
    broken = ReferenceSet.model_construct(
        name="broken", title="", source="s", description="", rows=[row, row]
    )
    with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
        store.put(broken)
    assert _counts(db) == (0, 0)
    assert store.get("broken") is None


def test_names_replace_and_the_builtin_set_is_protected(db: Database) -> None:
    store = ReferenceStore(db)
    store.put(small())
    with pytest.raises(ReferenceExists):
        store.put(small(value=70.0))
    store.put(small(value=70.0), replace=True)
    assert store.get("mine").rows[0].value == 70.0  # type: ignore[union-attr]
    store.ensure_builtin()
    with pytest.raises(ReferenceExists, match="built in"):
        store.put(small(name="published"), replace=True)
    with pytest.raises(ValueError, match="built in"):
        store.delete("published")
    assert store.delete("mine") and not store.delete("mine")
    assert _counts(db)[0] == 1


def test_ensure_builtin_is_idempotent_and_refreshes_stale_rows(db: Database) -> None:
    store = ReferenceStore(db)
    stale = published().model_copy(update={"rows": published().rows[:3]})
    store.put(stale, builtin=True)
    store.ensure_builtin()
    store.ensure_builtin()
    assert store.get("published") == published()
    assert _counts(db) == (1, len(published().rows))


def _finish(repo: Repository, sid: int, value_of: dict[str, float | None]) -> None:
    while (lease := repo.lease_next(sid, "w", 60)) is not None:
        v = value_of[lease.config.norm.name]
        result = (
            TrialResult(status="diverged", objective="val_acc", diverged_at_step=3)
            if v is None
            else TrialResult(status="complete", metrics={"val_acc": v}, objective="val_acc")
        )
        assert repo.finish_trial(lease.id, "w", lease.attempt, result)


def test_proxy_trials_match_cells_and_keep_to_the_preset_setting(db: Database) -> None:
    repo = Repository(db, max_attempts=3)
    store = ReferenceStore(db)
    sid = repo.create_study(StudySpec(kind="property", proxy="vit-tiny"))
    names = ("shift_h(erf, 0)", "identity", "layernorm")
    repo.add_trials(
        sid,
        [
            TrialConfig(proxy="vit-tiny", norm=NormSpec(name=n), seed=i)
            for n in names
            for i in (0, 1)
        ]
        # a different recipe (more epochs): not the preset's own setting
        + [TrialConfig(proxy="vit-tiny", norm=NormSpec(name="erf"), seed=0, epochs=9)],
    )
    _finish(repo, sid, {"shift_h(erf, 0)": 0.8, "identity": None, "layernorm": 0.9, "erf": 0.1})
    trials, scope = store.proxy_trials(proxy="vit-tiny")
    assert scope["trials"] == 6 and scope["arms"] == 3
    erf = cell_key(Cell(function="erf"))
    assert sorted(t.objective for t in trials if t.cell == erf) == [0.8, 0.8]  # type: ignore[type-var]
    assert all(t.failed for t in trials if t.cell == cell_key(Cell(function="identity")))
    # only the cells asked for are loaded
    only, _ = store.proxy_trials(proxy="vit-tiny", cell_keys={erf})
    assert {t.cell for t in only} == {erf}
    # a study is read in the setting most of its trials share (the 6, not the epochs=9 one)
    _, study_scope = store.proxy_trials(study_id=sid)
    assert study_scope["trials"] == 6
    assert store.proxy_trials(proxy="dit-tiny")[0] == []


def test_rows_keep_their_order_and_intervals(db: Database) -> None:
    store = ReferenceStore(db)
    store.ensure_builtin()
    got = store.get("published")
    assert got is not None
    assert [r.setting for r in got.rows] == [r.setting for r in published().rows]
    assert any(isinstance(r, ReferenceRow) and r.value_low != r.value_high for r in got.rows)


def test_a_set_read_while_another_transaction_replaces_it_is_whole(db: Database) -> None:
    """A reader of a set being replaced sees the old set or the new one, never a set of no
    rows: read as two statements, the set row from before a replace and its rows from after
    (none: they went with it) failed validation on PostgreSQL, a 500 when twenty imports of
    one set raced (each statement sees its own snapshot there)."""
    import threading

    store = ReferenceStore(db)
    ref = small("raced")
    store.put(ref)
    stop = threading.Event()
    errors: list[BaseException] = []

    def replace() -> None:
        other = ReferenceStore(db)
        while not stop.is_set():
            other.put(ref, replace=True)

    writer = threading.Thread(target=replace, daemon=True)
    writer.start()
    try:
        seen = 0
        for _ in range(400):
            try:
                got = store.get("raced")
            except Exception as exc:  # the bug: a validation error of a set without rows
                errors.append(exc)
                break
            if got is not None:
                assert got.rows == ref.rows
                seen += 1
    finally:
        stop.set()
        writer.join(30)
    assert not errors, errors[0]
    assert seen > 0
