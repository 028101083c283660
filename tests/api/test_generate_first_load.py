"""A generate study's page and summary show the property importance its driver stored when the
trials were written (``normfree:importance`` on its Optuna study, as for a search), never one
computed on the read; a lagging one is marked stale and refreshed in the background, and the
refresh's landing moves the study's key so that the page shows it (issue 27, point 6)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from normfree import storage
from normfree.api import search_importance
from normfree.testing.search_seeding import GENERATE_SPEC, seed_search_study
from tests.api.conftest import Api
from tests.api.test_search_first_load import _no_compute, _set_stored


def _generate(api: Api, sid: int) -> dict[str, Any]:
    r = api.client.get(f"/api/studies/{sid}", params={"trials": "false"})
    assert r.status_code == 200, r.text
    return r.json()["generate"]


def test_the_page_reads_the_stored_importance(
    make_api: Any, sqlite_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = make_api(sqlite_database_url)
    sid = seed_search_study(writer.settings, GENERATE_SPEC).study_id  # the driver stores it
    monkeypatch.setattr("normfree.workers.importance._importance_of_rows", _no_compute)
    fresh = make_api(sqlite_database_url)  # a new server: nothing in memory
    page = fresh.client.get(f"/studies/{sid}")
    assert page.status_code == 200, page.text
    assert 'id="importance-figure"' in page.text and 'id="importance-stale"' not in page.text
    gen = _generate(fresh, sid)
    assert gen["importance_stale"] is False
    assert gen["importance"]["n_candidates"] == 5 and gen["importance"]["features"]
    assert search_importance.refreshes_running(fresh.app.state.services) == 0
    # the command line (no server to refresh in the background) takes the stored one too
    from normfree.workers import kinds

    report = kinds.get("generate").report(storage.open(writer.settings), sid)
    assert report is not None and report["importance"] == gen["importance"]


def test_a_lagging_importance_is_marked_then_refreshed(
    make_api: Any, sqlite_database_url: str
) -> None:
    writer = make_api(sqlite_database_url)
    sid = seed_search_study(writer.settings, GENERATE_SPEC).study_id
    # what a server finds when trials finished after the driver stored it
    old = {"counts": {"COMPLETE": 2, "PRUNED": 2}, "importance": {"n_candidates": 4, "old": 1}}
    _set_stored(writer.settings, sid, old)
    fresh = make_api(sqlite_database_url)
    first = _generate(fresh, sid)
    assert first["importance_stale"] is True and first["importance"]["old"] == 1
    page = fresh.client.get(f"/studies/{sid}").text
    # the refresh may land before the page is built: then it is fresh
    assert 'id="importance-stale"' in page or 'id="importance-figure"' in page
    deadline = time.monotonic() + 120
    while (gen := _generate(fresh, sid))["importance_stale"] and time.monotonic() < deadline:
        time.sleep(0.2)
    # no write to our database since: the refresh's landing alone moved the study's key
    assert gen["importance_stale"] is False and gen["importance"]["n_candidates"] == 5
    page = fresh.client.get(f"/studies/{sid}").text
    assert 'id="importance-stale"' not in page and 'id="importance-figure"' in page
    # stored: the next start finds it fresh at once
    assert _generate(make_api(sqlite_database_url), sid)["importance_stale"] is False


def test_the_command_line_computes_a_lagging_one(make_api: Any, sqlite_database_url: str) -> None:
    """Without a server's background refresh, a report whose stored importance lags the trials
    computes it (``normfree study run|status`` print it when the study ends)."""
    from normfree.workers import kinds

    writer = make_api(sqlite_database_url)
    sid = seed_search_study(writer.settings, GENERATE_SPEC).study_id
    _set_stored(writer.settings, sid, {"counts": {"COMPLETE": 1}, "importance": {"old": 1}})
    report = kinds.get("generate").report(storage.open(writer.settings), sid)
    assert report is not None and report["importance_stale"] is False
    assert report["importance"]["n_candidates"] == 5
