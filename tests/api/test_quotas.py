"""Issue 28, point 2: quotas per client (the peer, not what it claims) and per token (a budget
of unfinished trial-seconds), and estimates that bound what every kind can spend."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi.testclient import TestClient

from normfree.testing.live import live_server
from tests.api import bodies

STUDY = bodies.study(epochs=100)  # 50 trial-seconds at vit-tiny's 0.5 s per epoch


def _peer(api: Any, address: str) -> TestClient:
    """A client of the same app that connects from ``address``."""
    return TestClient(api.app, client=(address, 40000))


def test_forwarded_for_from_an_untrusted_peer_buys_no_fresh_quota(make_api, sqlite_database_url):
    api = make_api(sqlite_database_url, prescreen=False, anonymous_parses_per_minute=1)
    peer = _peer(api, "203.0.113.5")
    first = peer.get("/api/candidates/tanh(u)+0.001", headers={"X-Forwarded-For": "10.0.0.1"})
    assert first.status_code == 200, first.text
    again = peer.get("/api/candidates/tanh(u)+0.002", headers={"X-Forwarded-For": "10.0.0.2"})
    assert again.status_code == 429 and int(again.headers["Retry-After"]) >= 1
    # another peer is another client
    assert _peer(api, "203.0.113.6").get("/api/candidates/tanh(u)+0.001").status_code == 200


def test_a_trusted_proxy_names_the_client(make_api, sqlite_database_url):
    api = make_api(
        sqlite_database_url,
        prescreen=False,
        anonymous_parses_per_minute=1,
        trusted_proxies="203.0.113.0/28, 2001:db8::1",
    )
    proxy = _peer(api, "203.0.113.5")
    # the nearest untrusted hop is the client; a spoofed left-most value does not matter
    hops = {"X-Forwarded-For": "1.2.3.4, 198.51.100.1"}
    assert proxy.get("/api/candidates/tanh(u)+0.001", headers=hops).status_code == 200
    hops = {"X-Forwarded-For": "9.9.9.9, 198.51.100.1"}
    assert proxy.get("/api/candidates/tanh(u)+0.002", headers=hops).status_code == 429
    hops = {"X-Forwarded-For": "198.51.100.2"}
    assert proxy.get("/api/candidates/tanh(u)+0.001", headers=hops).status_code == 200
    # the same header from a peer that is no trusted proxy is ignored: the peer is the client
    other = _peer(api, "198.51.100.9")
    hops = {"X-Forwarded-For": "198.51.100.77"}
    assert other.get("/api/candidates/tanh(u)+0.003", headers=hops).status_code == 200
    hops = {"X-Forwarded-For": "198.51.100.78"}
    assert other.get("/api/candidates/tanh(u)+0.001", headers=hops).status_code == 429


def test_a_bad_trusted_proxy_setting_is_an_error_at_start():
    import pytest
    from pydantic import ValidationError

    from normfree.settings import Settings

    with pytest.raises(ValidationError, match="not an address or network"):
        Settings(trusted_proxies="10.0.0.1, proxy.local")


def test_the_real_server_ignores_forwarded_for_from_loopback(sqlite_database_url: str) -> None:
    """uvicorn trusted X-Forwarded-For from 127.0.0.1 by default: a fresh value per request
    was a fresh anonymous quota. ``serve`` turns its proxy handling off."""
    # the parse's own time limit is not what this checks: generous, for a loaded CI machine
    env = {"NORMFREE_ANONYMOUS_PARSES_PER_MINUTE": "1", "NORMFREE_OFFLOAD_SECONDS": "300"}
    with (
        live_server(sqlite_database_url, "--no-run-studies", env=env) as base,
        httpx.Client(base_url=base, timeout=120) as c,
    ):
        r = c.get("api/candidates/tanh(u)+0.001", headers={"X-Forwarded-For": "10.1.1.1"})
        assert r.status_code == 200, r.text
        r = c.get("api/candidates/tanh(u)+0.002", headers={"X-Forwarded-For": "10.1.1.2"})
        assert r.status_code == 429


def test_a_token_s_unfinished_studies_are_held_to_its_budget(make_api, sqlite_database_url):
    api = make_api(sqlite_database_url, prescreen=False, max_token_trial_seconds=120.0)
    ids = []
    for _ in range(2):
        r = api.client.post("/api/studies", json=STUDY, headers=api.auth)
        assert r.status_code == 201, r.text
        assert r.json()["estimate"]["trial_seconds"] == 50.0
        ids.append(r.json()["id"])
    r = api.client.post("/api/studies", json=STUDY, headers=api.auth)
    assert r.status_code == 429, r.text
    body = r.json()
    assert body["error"] == "budget_exceeded" and int(r.headers["Retry-After"]) >= 1
    assert body["detail"] == {
        "in_use_seconds": 100.0,
        "asked_seconds": 50.0,
        "limit_seconds": 120.0,
    }
    assert "NORMFREE_MAX_TOKEN_TRIAL_SECONDS" in body["message"]
    assert len(api.repo.list_studies()) == 2  # nothing of the refused study was written
    # another token has its own budget
    other = api.repo.create_token("other")
    r = api.client.post("/api/studies", json=STUDY, headers={"Authorization": f"Bearer {other}"})
    assert r.status_code == 201
    # a cancelled study no longer holds any of it
    assert api.client.post(f"/api/studies/{ids[0]}/cancel", headers=api.auth).status_code == 200
    assert api.client.post("/api/studies", json=STUDY, headers=api.auth).status_code == 201


def test_ten_big_studies_from_one_token_the_later_ones_refused(make_api, sqlite_database_url):
    """Issue 28's probe, scaled down: the per-study budget holds each request, the token's
    budget holds the sum (default: twice the per-study budget)."""
    api = make_api(
        sqlite_database_url,
        prescreen=False,
        max_study_trial_seconds=1_000.0,
        max_token_trial_seconds=2_000.0,
    )
    big = {**STUDY, "epochs": 900, "seeds": 2}  # 900 trial-seconds each
    codes = [
        api.client.post("/api/studies", json=big, headers=api.auth).status_code for _ in range(10)
    ]
    assert codes == [201, 201] + [429] * 8


def test_every_kind_s_estimate_bounds_its_work(make_api, sqlite_database_url):
    api = make_api(sqlite_database_url, prescreen=False)
    generate = {
        "kind": "generate",
        "proxy": "vit-tiny",
        "seeds": 1,
        "params": {"generations": 1000, "population": 1, "max_proposals": 100000},
    }
    r = api.client.post("/api/studies", json=generate, headers=api.auth)
    assert r.status_code == 422, r.text
    assert "proposing and prescreening" in r.json()["message"]
    search = {
        "kind": "search",
        "proxy": "vit-tiny",
        "seeds": 1,
        "epochs": 1,
        "sampler": "random",
        "n_trials": 2000,
        "extra_seeds_for_top": 10,
        "params": {"top_arms": 100},
    }
    r = api.client.post("/api/studies", json=search, headers=api.auth)
    assert r.status_code == 422, r.text
    assert "3000 trials" in r.json()["message"]
    assert api.repo.list_studies() == []
    small = {**generate, "params": {"generations": 1, "population": 2}}
    r = api.client.post("/api/studies", json=small, headers=api.auth)
    assert r.status_code == 201, r.text
    est = r.json()["estimate"]
    assert 0 < est["planning_seconds"] < est["trial_seconds"] <= est["budget_seconds"]
