"""``normfree study tag|note|archive|delete|list`` and ``normfree candidates archive|delete``,
and tokens with an expiry and a scope made by ``normfree token create`` then used over HTTP:
real processes over a real SQLite file (issue 27, point 5)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from normfree.settings import Settings
from normfree.testing.live import run_cli
from normfree.testing.seeding import seed_property_study


def _json(args: list[str], url: str, run: Any = run_cli) -> Any:
    done = run([*args, "--json"], url)
    code = getattr(done, "returncode", getattr(done, "exit_code", None))
    assert code == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _in_process(url: str) -> Any:
    """``run_cli`` in this process (click's runner, the same command code; ``--db`` names the
    database): a study's housekeeping takes a dozen commands, each a second of start-up as a
    process on a busy machine. The refusal without a terminal below runs as a real process."""
    from click.testing import CliRunner

    from normfree.cli import main

    runner = CliRunner()

    def run(args: list[str], _url: str) -> Any:
        return runner.invoke(main, [*args, "--db", url], catch_exceptions=False)

    return run


def test_tags_notes_archive_and_delete_from_the_cli(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'normfree.db'}"
    sid = seed_property_study(Settings(database_url=url)).study_id
    cli = _in_process(url)

    def j(args: list[str]) -> Any:
        return _json(args, url, cli)

    assert j(["study", "tag", str(sid), "screen", "v2"])["tags"] == ["screen", "v2"]
    assert j(["study", "tag", str(sid), "--remove", "v2"])["tags"] == ["screen"]
    bad = cli(["study", "tag", str(sid), "a,b"], url)
    assert bad.exit_code != 0 and "commas" in bad.stderr
    assert cli(["study", "tag", "999", "x"], url).exit_code == 1
    assert j(["study", "note", str(sid), "lr too high"])["note"] == "lr too high"
    human = cli(["study", "list", "--tag", "screen"], url).stdout
    assert f"{sid}\t" in human and "[screen]" in human and "lr too high" in human
    assert j(["study", "list", "--tag", "other"]) == []
    # archive: off the list and the leaderboard, back with --restore
    board = j(["leaderboard", "--proxy", "vit-tiny"])
    assert j(["study", "archive", str(sid)]) == {"study_id": sid, "archived": True}
    assert j(["study", "list"]) == []
    assert [s["id"] for s in j(["study", "list", "--archived"])] == [sid]
    resumed = cli(["study", "resume", str(sid), "--detach"], url)  # not driven while archived
    assert resumed.exit_code == 1 and "--restore" in resumed.stderr
    assert j(["study", "archive", str(sid), "--restore"])["archived"] is False
    assert j(["leaderboard", "--proxy", "vit-tiny"]) == board
    # delete: the preview first; --json cannot ask; a person is asked and may say no
    preview = j(["study", "delete", str(sid), "--dry-run"])["removes"]
    assert preview["trials"] > 0 and preview["optuna_study"] == f"normfree-study-{sid}"
    asks = cli(["study", "delete", str(sid), "--json"], url)
    assert asks.exit_code != 0 and "--yes" in json.loads(asks.stdout)["error"]
    said_no = run_cli(["study", "delete", str(sid)], url)  # no terminal: the answer is no
    assert said_no.returncode != 0 and f"{preview['trials']} trials" in said_no.stdout
    assert "nothing deleted" in said_no.stderr
    arm = preview["arms"][0]
    gone = j(["study", "delete", str(sid), "--arm", arm, "--yes"])
    assert gone["deleted"] and gone["removes"]["arms"] == [arm]
    done = j(["study", "delete", str(sid), "--yes"])
    assert done["removes"]["trials"] == preview["trials"] - gone["removes"]["trials"]
    assert cli(["study", "delete", str(sid), "--yes"], url).exit_code == 1  # gone


def test_candidates_archive_and_delete_from_the_cli(tmp_path: Path) -> None:
    from normfree.storage import Database, Repository

    url = f"sqlite:///{tmp_path / 'normfree.db'}"
    db = Database(url)
    db.migrate()
    try:
        repo = Repository(db)
        for name in ("kept", "spare"):
            repo.claim_candidate({"name": name, "formula": "tanh(u)", "canonical": name}, "me")
    finally:
        db.dispose()
    seed = seed_property_study(Settings(database_url=url))
    # the seeded study ran erf and tanh; make "kept" one a study ran
    db = Database(url)
    try:
        repo = Repository(db)
        from normfree.specs import NormSpec, StudySpec, TrialConfig

        sid = repo.create_study(StudySpec(kind="property", proxy="vit-tiny"))
        repo.add_trials(sid, [TrialConfig(proxy="vit-tiny", norm=NormSpec(name="kept"), seed=0)])
    finally:
        db.dispose()
    assert seed.study_id != sid
    refused = run_cli(["candidates", "delete", "kept", "--yes", "--json"], url)
    assert refused.returncode == 1
    assert json.loads(refused.stdout)["used_by_studies"] == [sid]
    assert _json(["candidates", "delete", "kept", "--dry-run"], url)["removes"]["blocked"]
    assert _json(["candidates", "archive", "kept"], url) == {"candidate": "kept", "archived": True}
    assert _json(["candidates", "delete", "spare", "--yes"], url)["deleted"] is True
    assert run_cli(["candidates", "delete", "spare", "--yes"], url).returncode == 1


def test_cli_made_tokens_expire_and_read_tokens_cannot_write(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from normfree.api import create_app

    url = f"sqlite:///{tmp_path / 'normfree.db'}"
    brief = _json(["token", "create", "brief", "--expires", "2s"], url)
    assert brief["expires_at"] is not None and brief["scope"] == "write"
    reader = _json(["token", "create", "peek", "--scope", "read", "--expires", "30d"], url)
    bad = run_cli(["token", "create", "x", "--expires", "yesterday"], url)
    assert bad.returncode != 0 and "duration" in bad.stderr
    past = run_cli(["token", "create", "x", "--expires", "2020-01-01"], url)
    assert past.returncode != 0 and "next 100 years" in past.stderr
    body = {"name": "mine", "formula": "u/(3+abs(u))**0.8"}
    app = create_app(Settings(database_url=url), run_studies=False, prescreen=False)
    with TestClient(app) as c:
        r = c.post(
            "/api/candidates", json=body, headers={"Authorization": f"Bearer {reader['token']}"}
        )
        assert r.status_code == 403 and "scope 'read'" in r.json()["message"]
        time.sleep(2.5)
        r = c.post(
            "/api/candidates", json=body, headers={"Authorization": f"Bearer {brief['token']}"}
        )
        assert r.status_code == 401 and "expired at" in r.json()["message"]
        assert c.get("/api/candidates/mine").status_code == 404  # nothing was stored
