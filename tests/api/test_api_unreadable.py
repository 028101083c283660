"""The JSON API on corrupt stored rows (issue 24, point 2), through real HTTP on a real SQLite
file: every read answers 200 (or a clean 4xx), shows what it could read, and names what it
could not in ``unreadable`` (the field itself null or empty) -- never a 500.

Each kind of stored JSON is corrupted two ways: text that is not JSON (SQLite's JSON text
allows it; it reads as None, ``storage.db.tolerant_json_loads``) and JSON of the wrong shape
(a string or a list where a mapping belongs; PostgreSQL's JSONB allows that too).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import sqlalchemy as sa

from tests.api.conftest import Api, raising
from tests.api.test_page_names import PROXY, store_arms

HTML = {"Accept": "text/html"}
NOT_JSON, NOT_A_MAPPING = "{oops", '"oops"'


@pytest.fixture
def sid(api: Api) -> int:
    api.repo.upsert_candidate(
        {"name": "mine", "formula": "tanh(u)", "canonical": "tanh(u)", "group": "odd"}
    )
    sid = store_arms(api.repo, {"erf": "complete", "mine": "complete", "bad": "failed"})
    api.repo.set_study_status(sid, "complete")
    # the finished trials' stored documents would answer instead of their rows: drop them
    _exec(api, "UPDATE trials SET document = NULL")
    return sid


def _exec(api: Api, sql: str, **params: object) -> None:
    with api.repo.db.session() as s:
        s.execute(sa.text(sql), params)


def _ok(api: Api, url: str) -> Any:
    r = api.client.get(url)
    assert r.status_code == 200, (url, r.status_code, r.text[:300])
    return r.json()


def _first_trial(api: Api, sid: int) -> int:
    with api.repo.db.session() as s:
        return int(
            s.execute(
                sa.text("SELECT min(id) FROM trials WHERE study_id = :i"), {"i": sid}
            ).scalar()
        )


@pytest.mark.parametrize("bad", [NOT_JSON, NOT_A_MAPPING, "[1]"])
def test_trial_fields(api: Api, sid: int, bad: str) -> None:
    tid = _first_trial(api, sid)
    for column in ("axis_values", "config", "metrics", "norm"):
        _exec(api, f"UPDATE trials SET {column} = :v WHERE id = :i", v=bad, i=tid)
    t = _ok(api, f"/api/trials/{tid}")
    assert sorted(t["unreadable"]) == ["axis_values", "config", "metrics"]
    assert t["axis_values"] is None and t["config"] is None and t["metrics"] is None
    assert t["status"] == "COMPLETE" and t["curves"]  # the rest is shown

    detail = _ok(api, f"/api/studies/{sid}")
    assert any(u.startswith(f"axis_values (trial {tid})") for u in detail["unreadable"])
    listed = {t["id"]: t for t in detail["trials"]}
    assert listed[tid]["axis_values"] is None and listed[tid]["unreadable"] == ["axis_values"]
    assert listed[tid + 1]["unreadable"] == [] and listed[tid + 1]["axis_values"]
    assert {c["function"] for c in detail["cells"]} == {"erf", "mine", "bad"}
    page = _ok(api, f"/api/studies/{sid}/trials?limit=100")["items"]
    assert next(t for t in page if t["id"] == tid)["unreadable"] == ["axis_values"]
    summary = _ok(api, f"/api/studies/{sid}?trials=false")
    assert summary["unreadable"] == detail["unreadable"]
    # a study's board is built from its trials (not the arm summaries): the arm stays, named
    board = _ok(api, f"/api/leaderboards/{PROXY}?study_id={sid}")
    rows = {r["function"]: r for r in board["rows"]}
    assert sorted(rows["erf"]["unreadable"]) == ["axis_values", "config", "norm"]
    assert rows["erf"]["ranked"] and rows["mine"]["unreadable"] == []


@pytest.mark.parametrize("bad", [NOT_JSON, "[1, 2]"])
def test_curve_points_and_diagnostics(api: Api, sid: int, bad: str) -> None:
    tid = _first_trial(api, sid)
    _exec(api, "UPDATE trial_metrics SET metrics = :v WHERE trial_id = :i", v=bad, i=tid)
    _exec(api, "UPDATE trial_diagnostics SET extra = :v WHERE trial_id = :i", v=bad, i=tid)
    t = _ok(api, f"/api/trials/{tid}")
    # every point keeps its losses; its metrics read as empty and are named
    assert t["curves"] and all(p["metrics"] == {} for p in t["curves"])
    assert all(p["train_loss"] is not None for p in t["curves"])
    epochs = [p["epoch"] for p in t["curves"]]
    assert [u for u in t["unreadable"] if u.startswith("curve")] == [
        f"curve metrics (epoch {e})" for e in epochs
    ]
    assert t["diagnostics"] and all(d["extra"] == {} for d in t["diagnostics"])
    assert any(u.startswith("diagnostic extras (epoch ") for u in t["unreadable"])
    page = api.client.get(f"/trials/{tid}", headers=HTML)
    assert page.status_code == 200 and 'id="page-notices"' in page.text
    assert "curves-figure" in page.text
    assert f"Could not read this trial&#39;s stored curve metrics (epoch {epochs[0]})" in page.text


@pytest.mark.parametrize("bad", [NOT_JSON, NOT_A_MAPPING])
@pytest.mark.parametrize("column", ["norm", "axis_values", "overrides", "seeds", "study_ids"])
def test_leaderboard_arm_summaries(api: Api, sid: int, column: str, bad: str) -> None:
    _exec(api, f"UPDATE arm_results SET {column} = :v WHERE candidate = 'mine'", v=bad)
    board = _ok(api, f"/api/leaderboards/{PROXY}")
    rows = {r["function"]: r for r in board["rows"]}
    assert rows["mine"]["unreadable"] == [column]
    assert rows["erf"]["unreadable"] == [] and rows["erf"]["ranked"]
    if column == "seeds":  # no value can be read: the arm cannot be ranked
        assert not rows["mine"]["ranked"] and rows["mine"]["rank"] is None
    results = _ok(api, "/api/candidates/mine")["results"]
    assert results and results[0]["unreadable"] == [column]
    page = api.client.get(f"/?proxy={PROXY}", headers=HTML)
    assert page.status_code == 200 and 'id="leaderboard"' in page.text
    assert "Could not read part of the stored results of mine" in page.text


@pytest.mark.parametrize("bad", [NOT_JSON, NOT_A_MAPPING, "[1]"])
def test_candidate_row(api: Api, sid: int, bad: str) -> None:
    for column in ("properties", "lineage", "prescreen"):
        _exec(api, f"UPDATE candidates SET {column} = :v WHERE name = 'mine'", v=bad)
    c = _ok(api, "/api/candidates/mine")
    # text that is not JSON reads as None: for the prescreen (a nullable column) that is "none
    # asked for"; properties and lineage are never NULL, so None there is named
    expected = ["properties", "lineage"] + ([] if bad == NOT_JSON else ["prescreen"])
    assert c["unreadable"] == expected
    assert c["properties"] == {} and c["lineage"] == {} and c["prescreen"] is None
    assert c["formula"] == "tanh(u)" and c["plot"] is not None  # the rest is shown
    board = _ok(api, f"/api/leaderboards/{PROXY}")
    mine = next(r for r in board["rows"] if r["function"] == "mine")
    assert mine["unreadable"] == ["properties"]
    filtered = _ok(api, f"/api/leaderboards/{PROXY}?property=odd")  # a filter still answers
    assert "mine" not in {r["function"] for r in filtered["rows"]}
    assert _ok(api, "/api/candidates?source=user")["count"] >= 1
    page = api.client.get("/candidates/mine", headers=HTML)
    assert page.status_code == 200
    assert "Could not read this candidate&#39;s stored properties" in page.text


@pytest.mark.parametrize("bad", [NOT_A_MAPPING, "[1]"])
def test_study_spec_of_the_wrong_shape(api: Api, sid: int, bad: str) -> None:
    _exec(api, "UPDATE studies SET spec = :v WHERE id = :i", v=bad, i=sid)
    detail = _ok(api, f"/api/studies/{sid}")
    assert detail["unreadable"] == ["spec"] and detail["spec"] == {}
    assert detail["cells"] and detail["trials"]
    listed = _ok(api, "/api/studies")["items"]
    assert next(s for s in listed if s["id"] == sid)["unreadable"] == ["spec"]


def test_a_failing_fidelity_line_costs_only_the_line(
    api: Api, sid: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from normfree.api import fidelity

    monkeypatch.setattr(fidelity, "summary", raising(ValueError("an unreadable reference set")))
    with caplog.at_level(logging.ERROR, logger="normfree.api.services.leaderboards"):
        board = _ok(api, f"/api/leaderboards/{PROXY}")
    assert board["fidelity"] is None and board["unreadable"] == ["fidelity"]
    assert [r["rank"] for r in board["rows"]][:2] == [1, 2]  # the ranking is intact
    assert any("fidelity line" in r.getMessage() and r.exc_info for r in caplog.records)
    page = api.client.get(f"/?proxy={PROXY}&group=", headers=HTML)
    assert page.status_code == 200
    assert 'id="leaderboard"' in page.text and "mine" in page.text  # the table stays
    assert 'id="fidelity-line"' not in page.text
    assert "Could not show the fidelity line" in page.text


@pytest.mark.postgres
def test_wrong_shapes_on_postgresql(make_api: Any, postgres_database_url: str) -> None:
    """JSONB holds only JSON, but of any shape: the same reads answer 200 there too."""
    api = make_api(postgres_database_url)
    api.repo.upsert_candidate(
        {"name": "mine", "formula": "tanh(u)", "canonical": "tanh(u)", "group": "odd"}
    )
    sid = store_arms(api.repo, {"erf": "complete", "mine": "complete"})
    api.repo.set_study_status(sid, "complete")
    tid = _first_trial(api, sid)
    _exec(api, "UPDATE trials SET document = NULL")
    for sql in (
        "UPDATE trials SET axis_values = CAST(:v AS jsonb), config = CAST(:v AS jsonb) "
        "WHERE id = :i",
        "UPDATE trial_metrics SET metrics = CAST(:v AS jsonb) WHERE trial_id = :i",
        "UPDATE arm_results SET seeds = CAST(:v AS jsonb) WHERE candidate = 'mine'",
        "UPDATE candidates SET properties = CAST(:v AS jsonb) WHERE name = 'mine'",
        "UPDATE studies SET spec = CAST(:v AS jsonb) WHERE id = :s",
    ):
        _exec(api, sql, v=NOT_A_MAPPING, i=tid, s=sid)
    t = _ok(api, f"/api/trials/{tid}")
    assert {"axis_values", "config"} <= set(t["unreadable"]) and t["config"] is None
    assert any(u.startswith("curve metrics (epoch ") for u in t["unreadable"])
    assert _ok(api, f"/api/studies/{sid}")["unreadable"][0] == "spec"
    rows = {r["function"]: r for r in _ok(api, f"/api/leaderboards/{PROXY}")["rows"]}
    assert rows["mine"]["unreadable"] == ["seeds", "properties"] and not rows["mine"]["ranked"]
    assert _ok(api, "/api/candidates/mine")["unreadable"] == ["properties"]
