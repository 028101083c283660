"""Ownership and scopes (issue 28, point 3): a study or a reference set belongs to the token that
created it; another write token gets 403, an admin token may; read-only and expired tokens
cannot write. Real app, real SQLite, tokens made by the real CLI code path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from normfree.api.services import create_token
from tests.api import bodies
from tests.api.conftest import Api

STUDY = bodies.study(values=[0, 0.5])
REFERENCE = bodies.reference("alices", source="a paper")


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _tokens(api: Api) -> tuple[dict[str, str], dict[str, str], dict[str, str], dict[str, str]]:
    """(alice: the fixture's write token, bob: another write token, an admin, a reader)."""
    repo = api.repo
    bob = create_token(repo, "bob")
    admin = create_token(repo, "root", scope="admin")
    reader = create_token(repo, "peek", scope="read")
    return api.auth, _bearer(bob), _bearer(admin), _bearer(reader)


def test_only_the_creator_or_an_admin_controls_a_study(api: Api) -> None:
    c = api.client
    alice, bob, admin, reader = _tokens(api)
    r = c.post("/api/studies", json=STUDY, headers=alice)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    assert api.repo.get_study(sid)["owner_token_id"] is not None
    for action in ("pause", "resume", "cancel"):
        refused = c.post(f"/api/studies/{sid}/{action}", headers=bob)
        assert refused.status_code == 403, refused.text
        assert "another token" in refused.json()["message"]
        assert c.post(f"/api/studies/{sid}/{action}", headers=reader).status_code == 403
    assert api.repo.get_study(sid)["status"] == "pending"  # nothing the refusals asked happened
    assert c.post(f"/api/studies/{sid}/pause", headers=alice).json()["status"] == "paused"
    assert c.post(f"/api/studies/{sid}/cancel", headers=admin).json()["status"] == "cancelled"
    # bob's own study is his to control, not alice's
    theirs = c.post("/api/studies", json=STUDY, headers=bob).json()["id"]
    assert c.post(f"/api/studies/{theirs}/pause", headers=alice).status_code == 403
    assert c.post(f"/api/studies/{theirs}/pause", headers=bob).status_code == 200
    # a study with no owner (made by the CLI, or before migration 0009): an admin's to control
    from normfree.testing.seeding import seed_property_study

    seeded = seed_property_study(api.settings)
    assert api.repo.get_study(seeded.study_id)["owner_token_id"] is None
    assert c.post(f"/api/studies/{seeded.study_id}/cancel", headers=alice).status_code == 403


def test_read_scope_cannot_write_and_expired_tokens_are_refused(api: Api) -> None:
    c = api.client
    _alice, _bob, _admin, reader = _tokens(api)
    r = c.post("/api/candidates", json={"name": "peeked", "formula": "u/(3+u**2)"}, headers=reader)
    assert r.status_code == 403 and "scope 'read'" in r.json()["message"]
    assert c.post("/api/studies", json=STUDY, headers=reader).status_code == 403
    assert c.post("/api/references", json=REFERENCE, headers=reader).status_code == 403
    assert api.repo.list_candidates(name_contains="peeked") == []
    gone = api.repo.create_token("gone", ["write"], expires_at=datetime.now(UTC) - timedelta(1))
    r = c.post("/api/studies", json=STUDY, headers=_bearer(gone))
    # expired: not credentials any more (401, RFC 6750's invalid_token), saying when
    assert r.status_code == 401 and "expired at" in r.json()["message"]
    assert 'error="invalid_token"' in r.headers["WWW-Authenticate"]
    later = create_token(api.repo, "later", expires_days=1)
    assert c.post("/api/studies", json=STUDY, headers=_bearer(later)).status_code == 201
    scopes = {t["name"]: t["scope"] for t in api.repo.list_tokens()}
    assert scopes == {
        "tester1": "write", "bob": "write", "root": "admin", "peek": "read", "gone": "write",
        "later": "write",
    }  # fmt: skip


def test_private_reads_take_a_read_token(make_api, sqlite_database_url: str) -> None:
    api = make_api(sqlite_database_url, public_reads=False)
    reader = create_token(api.repo, "peek", scope="read")
    assert api.client.get("/api/studies", headers=_bearer(reader)).status_code == 200


def test_only_the_importer_or_an_admin_replaces_or_deletes_a_reference_set(api: Api) -> None:
    c = api.client
    alice, bob, admin, _reader = _tokens(api)
    assert c.post("/api/references", json=REFERENCE, headers=alice).status_code == 201
    changed = {**REFERENCE, "title": "bob was here"}
    r = c.post("/api/references?replace=true", json=changed, headers=bob)
    assert r.status_code == 403, r.text
    assert c.delete("/api/references/alices", headers=bob).status_code == 403
    assert c.get("/api/references/alices").json()["title"] == ""  # untouched
    r = c.post("/api/references?replace=true", json=changed, headers=alice)
    assert r.status_code == 201 and r.json()["title"] == "bob was here"
    # the admin replaces it (and owns it after), then deletes it
    assert c.post("/api/references?replace=true", json=REFERENCE, headers=admin).status_code == 201
    assert c.delete("/api/references/alices", headers=alice).status_code == 403
    assert c.delete("/api/references/alices?dry_run=true", headers=alice).status_code == 403
    preview = c.delete("/api/references/alices?dry_run=true", headers=admin).json()
    assert preview == {"name": "alices", "deleted": False, "dry_run": True, "rows": 1}
    assert c.get("/api/references/alices").status_code == 200  # the preview removed nothing
    assert c.delete("/api/references/alices", headers=admin).json()["rows"] == 1
    assert c.get("/api/references/alices").status_code == 404
    assert c.delete("/api/references/alices", headers=admin).status_code == 404
    assert c.delete("/api/references/published", headers=admin).status_code == 409
    assert c.delete("/api/references/published").status_code == 401
    # the owner deletes its own
    assert c.post("/api/references", json=REFERENCE, headers=bob).status_code == 201
    assert c.delete("/api/references/alices", headers=bob).status_code == 200


def test_only_the_creator_or_an_admin_deletes_a_finished_study(api: Api) -> None:
    import optuna

    from normfree.storage import optuna_storage_url
    from normfree.testing.seeding import seed_property_study

    c = api.client
    alice, bob, admin, _reader = _tokens(api)
    sid = c.post("/api/studies", json=STUDY, headers=alice).json()["id"]
    busy = c.delete(f"/api/studies/{sid}", headers=alice)
    assert busy.status_code == 409 and "cancel it first" in busy.json()["message"]
    assert c.post(f"/api/studies/{sid}/cancel", headers=alice).status_code == 200
    assert c.delete(f"/api/studies/{sid}", headers=bob).status_code == 403
    assert c.get(f"/api/studies/{sid}").status_code == 200  # still there
    r = c.delete(f"/api/studies/{sid}", headers=alice)
    assert r.status_code == 200 and r.json()["id"] == sid and r.json()["deleted"] is True
    assert r.json()["removes"]["optuna_study"] == f"normfree-study-{sid}"  # what went
    assert c.get(f"/api/studies/{sid}").status_code == 404
    assert api.repo.list_trials(sid) == []
    names = optuna.get_all_study_names(storage=optuna_storage_url(api.settings))
    assert f"normfree-study-{sid}" not in names
    assert c.delete(f"/api/studies/{sid}", headers=alice).status_code == 404
    # a finished study with no owner (the CLI's): an admin's; its leaderboard rows go with it
    seeded = seed_property_study(api.settings)
    assert c.get("/api/leaderboards/vit-tiny").json()["rows"]
    assert c.delete(f"/api/studies/{seeded.study_id}", headers=alice).status_code == 403
    assert c.delete(f"/api/studies/{seeded.study_id}", headers=admin).status_code == 200
    board = c.get("/api/leaderboards/vit-tiny")
    assert board.status_code == 404 or board.json()["rows"] == [], board.text
