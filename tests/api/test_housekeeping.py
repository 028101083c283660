"""Housekeeping over REST (issue 27, point 5): deletes list what they remove first and leave
nothing behind; archives leave lists and leaderboards (``?archived=true`` shows them); tags and
notes; the failure modes: another token 403, a read token 403, an expired token 401, an unknown
id 404, a running study 409, a candidate a study ran 409. Real app, real SQLite."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from normfree.api.services import create_token
from normfree.specs import TrialResult
from normfree.storage.models import TrialMetricRow, TrialRow
from tests.api.conftest import Api

STUDY = {
    "kind": "property",
    "proxy": "vit-tiny",
    "functions": ["erf", "tanh"],
    "transform": "shift_h",
    "values": [0],
    "seeds": 2,
    "epochs": 1,
}


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _finished_study(api: Api, headers: dict[str, str], body: dict[str, Any] = STUDY) -> int:
    """A study made through the API (owned by ``headers``' token), its trials finished here
    (the test app runs no studies), then complete."""
    r = api.client.post("/api/studies", json=body, headers=headers)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    repo = api.repo
    repo.set_study_status(sid, "running")
    value = 0.5
    while (lease := repo.lease_next(sid, "w", 60)) is not None:
        value += 0.01
        done = TrialResult(
            status="complete", objective="val_acc", direction="maximize",
            metrics={"val_acc": value},
        )  # fmt: skip
        assert repo.finish_trial(lease.id, "w", lease.attempt, done)
    repo.set_study_status(sid, "complete")
    return sid


def _board(api: Api, query: str = "") -> set[str]:
    """The functions on the proxy's board (``shift_h(erf, 0)`` read as erf)."""
    r = api.client.get(f"/api/leaderboards/vit-tiny{query}")
    assert r.status_code == 200, r.text
    return {row["function"].removeprefix("shift_h(").split(",")[0] for row in r.json()["rows"]}


def test_delete_lists_first_and_leaves_nothing(api: Api) -> None:
    c = api.client
    bob = _bearer(create_token(api.repo, "bob"))
    sid = _finished_study(api, api.auth)
    assert _board(api) == {"erf", "tanh"}
    # another token, a read token, an unknown id: refused, nothing removed
    assert c.delete(f"/api/studies/{sid}?dry_run=true", headers=bob).status_code == 403
    reader = _bearer(create_token(api.repo, "peek", scope="read"))
    assert c.delete(f"/api/studies/{sid}", headers=reader).status_code == 403
    assert c.delete("/api/studies/9999?dry_run=true", headers=api.auth).status_code == 404
    assert c.delete(f"/api/studies/{sid}").status_code == 401
    preview = c.delete(f"/api/studies/{sid}?dry_run=true", headers=api.auth)
    assert preview.status_code == 200, preview.text
    body = preview.json()
    assert body["dry_run"] is True and body["deleted"] is False
    n = body["removes"]["trials"]
    assert n == len(api.repo.list_trials(sid)) > 0
    assert body["removes"]["optuna_study"] == f"normfree-study-{sid}"
    assert body["removes"]["leaderboard_arms"] > 0 and body["removes"]["blocked"] is None
    assert len(api.repo.list_trials(sid)) == n  # the preview removed nothing
    done = c.delete(f"/api/studies/{sid}", headers=api.auth)
    assert done.status_code == 200 and done.json()["removes"]["trials"] == n
    with api.repo.db.session(readonly=True) as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(TrialRow)) == 0
        assert s.scalar(sa.select(sa.func.count()).select_from(TrialMetricRow)) == 0
    assert _board(api) == set()  # the cached board moved with the delete
    assert c.get(f"/api/studies/{sid}").status_code == 404


def test_a_running_study_is_not_deleted_or_archived(api: Api) -> None:
    c = api.client
    sid = c.post("/api/studies", json=STUDY, headers=api.auth).json()["id"]
    preview = c.delete(f"/api/studies/{sid}?dry_run=true", headers=api.auth).json()
    assert "pending" in preview["removes"]["blocked"]
    assert c.delete(f"/api/studies/{sid}", headers=api.auth).status_code == 409
    assert c.post(f"/api/studies/{sid}/archive", headers=api.auth).status_code == 409


def test_an_archived_study_leaves_lists_and_boards_until_restored(api: Api) -> None:
    c = api.client
    sid = _finished_study(api, api.auth)
    c.get(f"/api/studies/{sid}?trials=false")  # cached now: the archive must move it
    before = _board(api)
    assert "erf" in before
    bob = _bearer(create_token(api.repo, "bob"))
    assert c.post(f"/api/studies/{sid}/archive", headers=bob).status_code == 403
    assert c.post("/api/studies/9999/archive", headers=api.auth).status_code == 404
    r = c.post(f"/api/studies/{sid}/archive", headers=api.auth)
    assert r.status_code == 200 and r.json()["archived"] is True
    assert _board(api) == set()
    assert _board(api, "?archived=true") == before
    assert [s["id"] for s in c.get("/api/studies").json()["items"]] == []
    listed = c.get("/api/studies?archived=true").json()["items"]
    assert [(s["id"], s["archived"]) for s in listed] == [(sid, True)]
    assert c.get(f"/api/studies/{sid}?trials=false").json()["archived"] is True
    # an archived study is not driven: restore it first
    assert c.post(f"/api/studies/{sid}/resume", headers=api.auth).status_code == 409
    assert c.post(f"/api/studies/{sid}/unarchive", headers=api.auth).json()["archived"] is False
    assert _board(api) == before


def test_an_arm_is_archived_or_deleted_by_study(api: Api) -> None:
    c = api.client
    sid = _finished_study(api, api.auth)
    detail = c.get(f"/api/studies/{sid}?trials=false").json()
    tanh = next(cell for cell in detail["cells"] if cell["function"] == "tanh")
    arm = tanh["arm_keys"][0]
    bob = _bearer(create_token(api.repo, "bob"))
    assert c.post(f"/api/studies/{sid}/arms/{arm}/archive", headers=bob).status_code == 403
    assert (
        c.post(f"/api/studies/{sid}/arms/{'0' * 64}/archive", headers=api.auth).status_code == 404
    )
    assert c.post(f"/api/studies/{sid}/arms/NOT-HEX/archive", headers=api.auth).status_code == 422
    r = c.post(f"/api/studies/{sid}/arms/{arm}/archive", headers=api.auth)
    assert r.status_code == 200 and r.json() == {
        "study_id": sid, "arm_key": arm, "candidate": None, "archived": True, "trials": 2,
    }  # fmt: skip
    assert "tanh" not in _board(api) and "tanh" in _board(api, "?archived=true")
    detail = c.get(f"/api/studies/{sid}?trials=false").json()  # the study still shows it
    assert detail["archived_arms"] == [arm]
    assert next(x for x in detail["cells"] if x["function"] == "tanh")["archived"] is True
    c.post(f"/api/studies/{sid}/arms/{arm}/unarchive", headers=api.auth)
    assert "tanh" in _board(api)
    preview = c.delete(f"/api/studies/{sid}/arms/{arm}?dry_run=true", headers=api.auth).json()
    assert preview["removes"]["trials"] == 2 and preview["removes"]["optuna_study"] is None
    assert c.delete(f"/api/studies/{sid}/arms/{arm}", headers=bob).status_code == 403
    assert c.delete(f"/api/studies/{sid}/arms/{arm}", headers=api.auth).status_code == 200
    assert "tanh" not in _board(api, "?archived=true")
    assert c.delete(f"/api/studies/{sid}/arms/{arm}", headers=api.auth).status_code == 404


def test_tags_and_notes(api: Api) -> None:
    c = api.client
    sid = _finished_study(api, api.auth)
    other = _finished_study(api, api.auth)
    r = c.patch(f"/api/studies/{sid}", json={"add_tags": ["screen", "v2"]}, headers=api.auth)
    assert r.status_code == 200 and r.json()["tags"] == ["screen", "v2"]
    r = c.patch(f"/api/studies/{sid}", json={"note": "seed 1 looks off"}, headers=api.auth)
    assert r.json()["note"] == "seed 1 looks off" and r.json()["tags"] == ["screen", "v2"]
    assert [s["id"] for s in c.get("/api/studies?tag=screen").json()["items"]] == [sid]
    assert {s["id"] for s in c.get("/api/studies").json()["items"]} == {sid, other}
    assert c.get(f"/api/studies/{sid}?trials=false").json()["note"] == "seed 1 looks off"
    bad = c.patch(f"/api/studies/{sid}", json={"add_tags": ["two words"]}, headers=api.auth)
    assert bad.status_code == 422 and "spaces" in bad.json()["message"]
    assert (
        c.patch(f"/api/studies/{sid}", json={"colour": "red"}, headers=api.auth).status_code == 422
    )
    bob = _bearer(create_token(api.repo, "bob"))
    assert c.patch(f"/api/studies/{sid}", json={"note": "x"}, headers=bob).status_code == 403
    assert c.patch("/api/studies/9999", json={"note": "x"}, headers=api.auth).status_code == 404
    r = c.patch(f"/api/studies/{sid}", json={"note": "", "remove_tags": ["v2"]}, headers=api.auth)
    assert r.json()["note"] is None and r.json()["tags"] == ["screen"]


def test_a_candidate_a_study_ran_is_archived_not_deleted(api: Api) -> None:
    c = api.client
    for name, formula in (("mysq", "u/(2+abs(u))**0.9"), ("mycube", "atan(u)*tanh(u/3)")):
        r = c.post("/api/candidates", json={"name": name, "formula": formula}, headers=api.auth)
        assert r.status_code in (201, 202) and r.json()["created"], r.text
    sid = _finished_study(api, api.auth, {**STUDY, "functions": ["mysq"], "seeds": 1})
    bob = _bearer(create_token(api.repo, "bob"))
    assert c.delete("/api/candidates/mycube", headers=bob).status_code == 403
    assert c.delete("/api/candidates/nosuch", headers=api.auth).status_code == 404
    assert c.delete("/api/candidates/erf", headers=api.auth).status_code == 404  # catalog
    preview = c.delete("/api/candidates/mysq?dry_run=true", headers=api.auth).json()
    assert preview["removes"]["used_by_studies"] == [sid] and preview["removes"]["blocked"]
    refused = c.delete("/api/candidates/mysq", headers=api.auth)
    assert refused.status_code == 409 and refused.json()["detail"]["used_by_studies"] == [sid]
    names = {x["name"] for x in c.get("/api/candidates?source=user").json()["items"]}
    assert names == {"mysq", "mycube"}
    assert c.post("/api/candidates/mysq/archive", headers=bob).status_code == 403
    assert c.post("/api/candidates/mysq/archive", headers=api.auth).json()["archived"] is True
    names = {x["name"] for x in c.get("/api/candidates?source=user").json()["items"]}
    assert names == {"mycube"}  # the cached list moved with the archive
    shown = c.get("/api/candidates?source=user&archived=true").json()["items"]
    assert {x["name"]: x["archived"] for x in shown} == {"mysq": True, "mycube": False}
    assert "mysq" in _board(api)  # the study's results are unchanged
    assert c.delete("/api/candidates/mycube", headers=api.auth).status_code == 200
    assert c.get("/api/candidates/mycube").status_code == 404


def test_token_scopes_and_expiry_over_the_whole_path(api: Api) -> None:
    c = api.client
    sid = _finished_study(api, api.auth)
    reader = _bearer(create_token(api.repo, "peek", scope="read"))
    r = c.patch(f"/api/studies/{sid}", json={"note": "x"}, headers=reader)
    assert r.status_code == 403 and "scope 'read'" in r.json()["message"]
    gone = api.repo.create_token("gone", ["admin"], expires_at=datetime.now(UTC) - timedelta(1))
    r = c.delete(f"/api/studies/{sid}", headers=_bearer(gone))
    assert r.status_code == 401 and "expired at" in r.json()["message"]
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    admin = _bearer(create_token(api.repo, "root", scope="admin", expires="1h"))
    assert c.patch(f"/api/studies/{sid}", json={"note": "ok"}, headers=admin).status_code == 200
