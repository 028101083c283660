"""``normfree serve`` and ``normfree token``: real processes, a real server on loopback."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from normfree.testing.live import live_server, run_cli


def test_token_lifecycle_and_serve(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'normfree.db'}"
    made = run_cli(["token", "create", "alice", "--json"], url)
    assert made.returncode == 0, made.stderr
    token = json.loads(made.stdout)["token"]
    assert token.startswith("nf_") and json.loads(made.stdout)["name"] == "alice"
    # human output: the token alone on stdout, the advice on stderr
    bob = run_cli(["token", "create", "bob"], url)
    assert bob.returncode == 0 and bob.stdout.strip().startswith("nf_")
    assert "shown only now" in bob.stderr
    dup = run_cli(["token", "create", "alice", "--json"], url)
    assert dup.returncode != 0 and "revoke it first" in json.loads(dup.stdout)["error"]
    bad = run_cli(["token", "create", "no spaces please"], url)
    assert bad.returncode != 0 and "letters, digits" in bad.stderr
    listed = json.loads(run_cli(["token", "list", "--json"], url).stdout)
    assert [t["name"] for t in listed] == ["alice", "bob"]
    assert all("token" not in t and "hash" not in str(t) for t in listed)

    with live_server(url, "--no-run-studies") as base:
        assert base.startswith("http://127.0.0.1:")
        assert httpx.get(base + "api/health", timeout=120).json()["status"] == "ok"
        assert httpx.get(base, headers={"Accept": "text/html"}, timeout=180).status_code == 200
        body = {"name": "clisquash", "formula": "atan(u)*2/pi"}
        auth = {"Authorization": f"Bearer {token}"}
        r = httpx.post(base + "api/candidates", json=body, headers=auth, timeout=180)
        # a duplicate, nothing stored; 202 while this server's prescreen of arctan still runs
        assert r.status_code in (200, 202) and r.json()["duplicate_of"] == "arctan"
        if r.status_code == 202:
            assert r.headers["location"] == "/api/candidates/arctan"
        revoked = run_cli(["token", "revoke", "alice", "--json"], url)
        assert json.loads(revoked.stdout) == {"name": "alice", "revoked": True}
        r = httpx.post(base + "api/candidates", json=body, headers=auth, timeout=180)
        assert r.status_code == 403

    again = run_cli(["token", "revoke", "alice"], url)
    assert again.returncode != 0 and "no active token" in again.stderr


def test_token_scopes_and_expiry_from_the_cli(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'normfree.db'}"
    admin = run_cli(["token", "create", "root", "--scope", "admin", "--json"], url)
    assert admin.returncode == 0, admin.stderr
    assert json.loads(admin.stdout)["scope"] == "admin"
    made = run_cli(["token", "create", "brief", "--expires-days", "0.5", "--json"], url)
    assert made.returncode == 0 and json.loads(made.stdout)["scope"] == "write"
    bad = run_cli(["token", "create", "x", "--scope", "owner"], url)
    assert bad.returncode != 0 and "owner" in bad.stderr
    listed = {t["name"]: t for t in json.loads(run_cli(["token", "list", "--json"], url).stdout)}
    assert listed["root"]["scope"] == "admin" and listed["root"]["expires_at"] is None
    assert listed["brief"]["expires_at"] is not None
    human = run_cli(["token", "list"], url).stdout
    assert "root\tadmin\tactive" in human
