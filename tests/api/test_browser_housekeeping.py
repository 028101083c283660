"""Housekeeping in a real browser (issue 27, point 5): the studies page shows a study's tags
and note and filters by tag, the study page shows them, and an archived study leaves the list
and the leaderboard page until "archived too" is ticked. Headless Debian Chromium against
``normfree serve`` on loopback, as ``test_browser.py`` (same skip rule)."""

from __future__ import annotations

from pathlib import Path

import pytest

from normfree.settings import Settings
from normfree.testing.live import live_server
from normfree.testing.seeding import seed_property_study
from tests.api.browser import chromium, need_chromium

pytestmark = pytest.mark.browser


def test_tags_notes_and_archives_in_a_real_browser(tmp_path: Path) -> None:
    need_chromium()

    from normfree.storage import Database, Repository

    url_db = f"sqlite:///{tmp_path / 'normfree.db'}"
    sid = seed_property_study(Settings(database_url=url_db)).study_id
    db = Database(url_db)
    try:
        repo = Repository(db)
        repo.tag_study(sid, add=["screen", "erf-shifts"])
        repo.note_study(sid, "seed 2 of shift 1 diverged <on purpose>")
        admin = repo.create_token("root", ["admin"])
    finally:
        db.dispose()
    shots = tmp_path / "screenshots"
    shots.mkdir()

    with live_server(url_db, "--no-run-studies") as base, chromium(tmp_path, height=900) as tab:
        page, errors = tab.page, tab.errors
        page.goto(base + "studies")
        row = page.locator("table tbody tr").first
        assert row.locator("td.tags .badge").all_text_contents() == ["erf-shifts", "screen"]
        # the note is text: its angle brackets are shown, not parsed
        assert row.locator("td.note").inner_text() == "seed 2 of shift 1 diverged <on purpose>"
        page.screenshot(path=str(shots / "studies_tags.png"), full_page=True)
        # a tag links to the list filtered by it; an unknown tag lists nothing, and says so
        row.locator("td.tags a", has_text="screen").click()
        page.wait_for_url("**/studies?tag=screen")
        assert page.locator("table tbody tr").count() == 1
        page.fill("#study-filters input[name=tag]", "nope")
        page.click("#study-filters button")
        page.wait_for_url("**tag=nope**")
        assert "No study tagged nope" in page.locator("main, body").first.inner_text()
        # the study page shows its tags and note
        page.goto(f"{base}studies/{sid}")
        notes = page.locator("#study-notes")
        assert notes.locator(".badge").all_text_contents() == ["erf-shifts", "screen"]
        assert "diverged <on purpose>" in notes.inner_text()
        # archived through the API: off the list and the leaderboard page
        r = page.request.post(
            f"{base}api/studies/{sid}/archive", headers={"Authorization": f"Bearer {admin}"}
        )
        assert r.status == 200 and r.json()["archived"] is True, r.text()
        page.goto(base + "studies")
        assert page.locator("table tbody tr").count() == 0
        page.check("#study-filters input[name=archived]")
        page.click("#study-filters button")
        page.wait_for_url("**archived=true**")
        shown = page.locator("table tbody tr.archived")
        assert shown.count() == 1 and "archived" in shown.first.inner_text()
        page.screenshot(path=str(shots / "studies_archived.png"), full_page=True)
        page.goto(f"{base}studies/{sid}")
        assert "archived" in page.locator("#study-notes .badge.no").inner_text()
        page.goto(base + "?proxy=vit-tiny")
        assert page.locator("#leaderboard tbody tr").count() == 0
        page.check("#archived")  # the leaderboard's own "archived too"
        page.click("form.filters button[type=submit]")
        page.wait_for_selector("#leaderboard tbody tr")
        assert page.locator("#leaderboard tbody tr").count() == 7
        assert not errors, errors
