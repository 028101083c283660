"""The search view's first load (issue 27, point 1): after a start it answers from the
importance the driver stored when the trials were written, says when that importance lags the
trials (and refreshes it in the background), and pages its trials."""

from __future__ import annotations

import time
from typing import Any

import pytest

from normfree.api import search_importance
from normfree.storage.study_documents import IMPORTANCE_ATTR
from normfree.testing.search_seeding import seed_search_study
from tests.api.conftest import Api


def _no_compute(*_: Any, **__: Any) -> Any:
    raise AssertionError("importance computed on a read")


def test_first_request_after_a_start_uses_the_stored_importance(
    make_api: Any, sqlite_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = make_api(sqlite_database_url)
    search = seed_search_study(writer.settings)  # the driver stores importance as trials end
    monkeypatch.setattr("normfree.workers.importance._importance_of_rows", _no_compute)
    fresh = make_api(sqlite_database_url)  # a new server: nothing in memory
    got = fresh.client.get(f"/api/studies/{search.study_id}/search")
    assert got.status_code == 200, got.text
    view = got.json()
    assert view["importance_stale"] is False
    assert view["importance"]["n_candidates"] == 5 and view["importance"]["features"]
    assert search_importance.refreshes_running(fresh.app.state.services) == 0
    page = fresh.client.get(f"/studies/{search.study_id}/search")
    assert page.status_code == 200 and 'id="importance-figure"' in page.text
    assert 'id="importance-stale"' not in page.text


def _set_stored(settings: Any, study_id: int, doc: dict[str, Any] | None) -> None:
    import optuna

    from normfree import storage
    from normfree.storage.db import optuna_study_name

    store = storage.open(settings)
    name = optuna_study_name(study_id)
    study = optuna.load_study(study_name=name, storage=store.optuna_storage())
    if doc is None:
        store.optuna_storage().set_study_user_attr(study._study_id, IMPORTANCE_ATTR, None)
    else:
        study.set_user_attr(IMPORTANCE_ATTR, doc)


def _wait_fresh(api: Api, url: str, timeout: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        view = api.client.get(url).json()
        if not view["importance_stale"] or time.monotonic() > deadline:
            return view
        time.sleep(0.2)


def test_a_stale_stored_importance_is_marked_and_refreshed(
    make_api: Any, sqlite_database_url: str
) -> None:
    writer = make_api(sqlite_database_url)
    search = seed_search_study(writer.settings)
    # what a server would find had a trial finished after the driver stored the importance
    old = {"counts": {"COMPLETE": 2, "PRUNED": 2}, "importance": {"n_candidates": 4, "old": 1}}
    _set_stored(writer.settings, search.study_id, old)
    fresh = make_api(sqlite_database_url)
    url = f"/api/studies/{search.study_id}/search"
    first = fresh.client.get(url).json()
    assert first["importance_stale"] is True and first["importance"]["old"] == 1
    page = fresh.client.get(f"/studies/{search.study_id}/search")
    assert page.status_code == 200
    view = _wait_fresh(fresh, url)
    assert view["importance_stale"] is False and view["importance"]["n_candidates"] == 5
    assert "old" not in view["importance"]
    # the refresh was stored: the next start finds it fresh at once
    again = make_api(sqlite_database_url)
    assert again.client.get(url).json()["importance_stale"] is False


def test_no_stored_importance_is_computed_in_the_background(
    make_api: Any, sqlite_database_url: str
) -> None:
    writer = make_api(sqlite_database_url)
    search = seed_search_study(writer.settings)
    _set_stored(writer.settings, search.study_id, None)  # a study from before it was stored
    fresh = make_api(sqlite_database_url)
    url = f"/api/studies/{search.study_id}/search"
    first = fresh.client.get(url).json()
    assert first["importance_stale"] is True and first["importance"] is None
    page = fresh.client.get(f"/studies/{search.study_id}/search")
    # the refresh may land before the page is built: then it draws the importance
    assert "Being computed" in page.text or 'id="importance-figure"' in page.text
    assert _wait_fresh(fresh, url)["importance"]["n_candidates"] == 5


def test_the_search_trials_are_paged(api: Api) -> None:
    search = seed_search_study(api.settings)
    url = f"/api/studies/{search.study_id}/search"
    whole = api.client.get(url).json()
    assert whole["total_trials"] == 5 and len(whole["trials"]) == 5
    assert whole["next_cursor"] is None
    seen: list[int] = []
    cursor = 0
    while True:
        page = api.client.get(url, params={"limit": 2, "cursor": cursor}).json()
        assert page["total_trials"] == 5 and len(page["trials"]) <= 2
        assert page["best"] == whole["best"] and page["counts"] == whole["counts"]
        seen += [t["order"] for t in page["trials"]]
        if page["next_cursor"] is None:
            break
        cursor = page["next_cursor"]
    assert seen == [1, 2, 3, 4, 5]
    past = api.client.get(url, params={"cursor": 5}).json()
    assert past["trials"] == [] and past["next_cursor"] is None


@pytest.mark.parametrize("query", ["limit=0", "limit=1001", "cursor=-1", "limit=abc"])
def test_a_bad_page_is_refused(api: Api, query: str) -> None:
    search = seed_search_study(api.settings)
    got = api.client.get(f"/api/studies/{search.study_id}/search?{query}")
    assert got.status_code == 422, got.text


def test_a_comparison_is_built_once_per_state_of_its_trials(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlalchemy as sa

    from normfree.api import compare
    from normfree.api.routers import compare as routes

    search = seed_search_study(api.settings)
    builds: list[int] = []
    real = compare.compare

    def counted(*args: Any, **kw: Any) -> Any:
        builds.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(routes, "compare", counted)
    tid = search.trial_ids["erf"]
    for url in (f"/api/compare?trials={tid}", f"/compare?trials={tid}"):
        first = api.client.get(url)
        assert first.status_code == 200 and api.client.get(url).text == first.text
    assert len(builds) == 2  # one per URL: the repeats were looked up
    with api.repo.db.session() as s:  # a write to the trial (as a new curve point makes)
        s.execute(
            sa.text("UPDATE trials SET updated_at = :t WHERE id = :i"),
            {"t": "2030-01-01 00:00:00", "i": tid},
        )
    assert api.client.get(f"/api/compare?trials={tid}").status_code == 200
    assert len(builds) == 3
