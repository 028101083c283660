"""The journey of issue 24, as a newcomer takes it: one's own function, end to end, in a browser.

A real ``normfree serve`` (SQLite, studies driven in-process on its embedded Ray) and headless
Chromium (from :mod:`tests.api.browser`; under CI=true it never skips):

1. create a token; submit a formula with "/" over REST (``softsign15``); wait for its prescreen;
2. run a property study and an options study on it BY NAME (smoke preset vit-tiny, 1 seed);
3. open the home page, the leaderboard, both study pages, the candidate page and the fidelity
   page, and check what each shows: the candidate's label, its results, no error;
4. the same with a study whose trials all fail (its dataset in the data root is not a dataset):
   every view says failed, with the reason, and the failed arm is not ranked.

And the CLI leg: ``normfree study property --functions softsign15`` by name exits 0 and trains;
``normfree study run`` of a study whose trials all fail exits non-zero.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from normfree.testing.live import live_server, run_cli
from tests.api.browser import Tab, chromium, need_chromium

NAME, FORMULA = "softsign15", "1.5*u/(1+abs(u))"
TINY = {"proxy": "vit-tiny", "seeds": 1, "epochs": 1}
PROPERTY = {
    "kind": "property",
    "functions": [NAME],
    "transform": "shift_h",
    "values": [0, 0.5],
    **TINY,
}
OPTIONS = {"kind": "options", "functions": [NAME], "options": {"alpha0": [0.5, 1.0]}, **TINY}
# A study whose every trial fails: its dataset is a file in the data root that is no dataset.
FAILING = {
    "kind": "property",
    "functions": [NAME],
    "transform": "shift_v",
    "values": [0.25],
    "baselines": [],
    "params": {"dataset": "broken"},
    "name": "doomed",
    **TINY,
}


def _wait(what: str, check: Callable[[], Any], timeout: float = 600.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(1.0)
    raise AssertionError(f"timed out waiting for {what}")


def _finished(http: httpx.Client, sid: int) -> dict[str, Any] | None:
    study = http.get(f"api/studies/{sid}").json()
    return study if study["status"] in ("complete", "failed", "cancelled") else None


def _broken_data_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    (root / "broken.npz").write_bytes(b"this is not an npz archive\n")
    return root


@pytest.mark.browser
def test_own_function_end_to_end_in_a_browser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_chromium()

    monkeypatch.setenv("NORMFREE_DATA_ROOT", str(_broken_data_root(tmp_path)))
    url_db = f"sqlite:///{tmp_path / 'journey.db'}"
    made = run_cli(["token", "create", "journey", "--json"], url_db)
    assert made.returncode == 0, made.stderr
    auth = {"Authorization": f"Bearer {json.loads(made.stdout.strip().splitlines()[-1])['token']}"}

    with live_server(url_db) as base, httpx.Client(base_url=base, timeout=120) as http:
        # 1. submit the formula by REST and wait for its prescreen
        r = http.post("api/candidates", json={"name": NAME, "formula": FORMULA}, headers=auth)
        assert r.status_code in (201, 202), r.text
        cand = _wait(
            "the prescreen",
            lambda: (
                (c := http.get(f"api/candidates/{NAME}").json())["prescreen"]["status"] != "pending"
                and c
            ),
            timeout=300,
        )
        assert cand["prescreen"]["status"] == "done", cand["prescreen"]
        # 2. studies on it by name, run by the server
        ids = {}
        for label, body in (("property", PROPERTY), ("options", OPTIONS), ("failing", FAILING)):
            r = http.post("api/studies", json=body, headers=auth)
            assert r.status_code == 201, (label, r.text)
            ids[label] = r.json()["id"]
        done = {
            k: _wait(f"study {k}", lambda sid=sid: _finished(http, sid)) for k, sid in ids.items()
        }
        assert done["property"]["status"] == "complete", done["property"]
        assert done["options"]["status"] == "complete", done["options"]
        assert done["failing"]["status"] == "failed", done["failing"]
        board = http.get("api/leaderboards/vit-tiny").json()
        rows = {r["candidate"]: r for r in board["rows"]}
        # one function one row: shift_h(f, 0) and the default alpha0 (0.5) are plain f
        trained = {f"shift_h({NAME}, 0.5)", NAME, f"{NAME} [alpha0=1.0]"}
        assert trained <= set(rows), sorted(rows)
        assert all(rows[label]["ranked"] and rows[label]["n"] >= 1 for label in trained), rows
        # a transform of the user's function is filed by its definition (group and properties)
        users = http.get("api/leaderboards/vit-tiny", params={"group": "user"}).json()["rows"]
        mine = {r["candidate"]: r for r in users}
        assert f"shift_h({NAME}, 0.5)" in mine, sorted(mine)
        assert mine[f"shift_h({NAME}, 0.5)"]["properties"]["bounded"] is True
        failed = [r for label, r in rows.items() if "shift_v" in label and NAME in label]
        assert failed and not any(r["ranked"] for r in failed), failed
        assert all(r["unranked_reason"] for r in failed), failed

        shots = tmp_path / "screenshots"
        shots.mkdir()
        with chromium(tmp_path) as tab:
            _pages(tab, base, ids, shots)


def _pages(tab: Tab, base: str, ids: dict[str, int], shots: Path) -> None:
    page, errors = tab.page, tab.errors

    def visit(path: str, shot: str) -> str:
        response = page.goto(base + path)
        assert response is not None and response.status == 200, (path, response and response.status)
        page.screenshot(path=str(shots / f"{shot}.png"), full_page=True)
        text = page.locator("body").inner_text()
        assert "Traceback" not in text and "Internal Server Error" not in text, (path, text[:500])
        return text

    # home page and the leaderboard of the smoke preset: the candidate's arms by label
    home = visit("", "home")
    assert "normfree" in home.lower()
    visit("?proxy=vit-tiny", "leaderboard")
    ranked = page.locator("#leaderboard tbody tr").all_inner_texts()
    assert any(f"shift_h({NAME}, 0.5)" in r for r in ranked), ranked
    assert any(f"{NAME} [alpha0=1.0]" in r for r in ranked), ranked
    # the failed arm is listed apart, unranked, with its reason
    assert not any("shift_v" in r for r in ranked), ranked
    unranked = page.locator("#unranked tbody tr").all_inner_texts()
    assert any(f"shift_v({NAME}, 0.25)" in r for r in unranked), unranked
    # its link reaches the candidate page (a name with "/" in the formula: the key is safe)
    page.locator("#leaderboard a", has_text=f"shift_h({NAME}, 0.5)").first.click()
    page.wait_for_load_state()
    assert NAME in page.locator("h1").inner_text()

    # the study pages: progress, cells with values, the plot
    for kind in ("property", "options"):
        text = visit(f"studies/{ids[kind]}", f"study-{kind}")
        assert page.locator("#progress-text").inner_text().startswith("complete"), kind
        assert page.locator("#study-failed").count() == 0
        assert NAME in page.locator("#cells").inner_text(), kind
        page.wait_for_selector("#study-figure .main-svg")
        assert page.locator("#cells .failure").count() == 0, kind  # no failure reasons

    # the candidate page: label, formula, its results across proxies (ranked)
    text = visit(f"candidates/{NAME}", "candidate")
    assert NAME in page.locator("h1").inner_text()
    assert FORMULA.replace(" ", "") in text.replace(" ", "")
    results = page.locator("table.sortable tbody tr").all_inner_texts()
    mine = [r for r in results if "vit-tiny" in r and r.split("\t")[1] == NAME]
    assert mine and "not ranked" not in mine[0], results
    page.wait_for_selector("#fn-figure .main-svg")

    # the fidelity page of the property study: the smoke preset's caveat, no verdict
    text = visit(f"fidelity?study_id={ids['property']}", "fidelity")
    assert page.locator("#fidelity-summary").count() == 1
    assert "calibrat" in text.lower(), text[:1500]

    # the failing study, in every view: failed, with the reason
    studies = visit("studies", "studies")
    row = page.locator("tr", has_text="doomed").inner_text()
    assert "failed" in row, row
    text = visit(f"studies/{ids['failing']}", "study-failing")
    assert page.locator("#progress-text").inner_text().startswith("failed")
    assert page.locator("#study-failed").count() == 1
    reason = page.locator("#cells .failure").all_inner_texts()
    assert reason and all(r.strip() for r in reason), reason
    visit("?proxy=vit-tiny", "leaderboard-after-failure")
    page.locator("#unranked a", has_text=f"shift_v({NAME}, 0.25)").first.click()
    page.wait_for_load_state()
    results = page.locator("table.sortable tbody tr").all_inner_texts()
    doomed = [r for r in results if "vit-tiny" in r]
    assert doomed and all("not ranked" in r for r in doomed), doomed
    assert not any("worse" in r for r in doomed), doomed
    # ... and the function's own page lists the failed transform among those built on it
    visit(f"candidates/{NAME}", "candidate-after-failure")
    built = page.locator("#derived + p + table tbody tr").all_inner_texts()
    failed = [r for r in built if f"shift_v({NAME}, 0.25)" in r]
    assert failed and all("not ranked" in r for r in failed), built
    assert not errors, errors
    del studies


def test_cli_studies_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_api: Callable[..., Any]
) -> None:
    """The CLI leg: a stored name trains; a study whose trials all fail exits non-zero."""
    monkeypatch.setenv("NORMFREE_DATA_ROOT", str(_broken_data_root(tmp_path)))
    url_db = f"sqlite:///{tmp_path / 'cli.db'}"
    api = make_api(url_db, prescreen=False)  # submitted over REST, as a user would
    stored = api.client.post(
        "/api/candidates", json={"name": NAME, "formula": FORMULA}, headers=api.auth
    )
    assert stored.status_code == 201, stored.text
    # fmt: off
    ran = run_cli(
        ["study", "property", "--functions", NAME, "--transform", "shift_h", "--values", "0.5",
         "--baselines", "", "--proxy", "vit-tiny", "--seeds", "1", "--epochs", "1", "--json"],
        url_db,
    )
    # fmt: on
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    out = json.loads(ran.stdout.strip().splitlines()[-1])
    assert out["run"]["status"] == "complete" and out["run"]["counts"]["COMPLETE"] == 1, out

    from normfree.settings import Settings
    from normfree.specs import StudySpec
    from normfree.workers.driver import create_study

    sid = create_study(StudySpec(**FAILING), settings=Settings(database_url=url_db))
    failed = run_cli(["study", "run", str(sid)], url_db)
    assert failed.returncode != 0, failed.stdout[-2000:]
    assert f"study {sid} failed" in failed.stderr, failed.stderr[-2000:]
