"""Comparing learning curves and a search's own view (issue 27, point 6): what the API answers,
that the pages draw it, and every refusal a URL can earn (4xx with the reason)."""

from __future__ import annotations

from typing import Any

import pytest

from normfree.testing.search_seeding import ACCURACY, SeededSearch, seed_search_study
from normfree.testing.seeding import Seeded
from tests.api.conftest import Api


@pytest.fixture
def search(api: Api) -> SeededSearch:
    return seed_search_study(api.settings)


def test_trials_compare_on_one_plot_in_the_order_asked(api: Api, seeded: Seeded) -> None:
    a, b, c = seeded.trial_ids[:3]
    got = api.client.get(f"/api/compare?trials={c},{a}&trials={b}")
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["mode"] == "trials" and [t["id"] for t in body["trials"]] == [c, a, b]
    assert body["metric"] == "val_acc" == body["objective"]  # the default: the objective
    assert {"train_loss", "val_loss", "val_acc"} <= set(body["metrics"])
    first = body["trials"][0]
    assert len(first["curves"]) == 3 and first["curves"][0]["epoch"] == 0
    # the arm label is the study's cell label
    cells = {x["label"] for x in api.client.get(f"/api/studies/{seeded.study_id}").json()["cells"]}
    assert {t["arm"] for t in body["trials"]} <= cells
    page = api.client.get(f"/compare?trials={a},{b}&metric=train_loss")
    assert page.status_code == 200
    assert 'id="compare-figure"' in page.text and "train_loss by epoch" in page.text
    assert f'href="http://testserver/trials/{a}"' in page.text


def test_arms_of_a_study_draw_every_seed_and_their_mean(api: Api, seeded: Seeded) -> None:
    study = api.client.get(f"/api/studies/{seeded.study_id}").json()
    labels = [c["label"] for c in study["cells"] if c["function"] == "erf"][:2]
    assert len(labels) == 2
    got = api.client.get(
        "/api/compare", params={"study": seeded.study_id, "arm": labels, "metric": "val_loss"}
    ).json()
    assert got["mode"] == "arms" and [a["label"] for a in got["arms"]] == labels
    assert all(len(a["trial_ids"]) == 2 for a in got["arms"])  # two seeds each
    assert len(got["trials"]) == 4 and got["metric"] == "val_loss"
    # one comma list works too: commas inside () and [] stay inside the label
    joined = api.client.get(
        "/api/compare", params={"study": seeded.study_id, "arms": ",".join(labels)}
    ).json()
    assert [a["label"] for a in joined["arms"]] == labels
    page = api.client.get("/compare", params={"study": seeded.study_id, "arm": labels})
    assert page.status_code == 200 and "(mean of 2)" in page.text
    # the study page offers its arms as checkboxes for this page
    study_page = api.client.get(f"/studies/{seeded.study_id}").text
    assert 'id="compare-form"' in study_page and f'value="{labels[0]}"' in study_page
    assert 'id="compare-trials-form"' in study_page  # and a field for trial ids


@pytest.mark.parametrize(
    ("query", "status", "words"),
    [
        ("", 422, "choose trials"),
        ("trials=abc", 422, "trials"),
        ("trials=0", 422, "trials"),
        ("trials=99999", 404, "no trial 99999"),
        ("trials=" + ",".join(str(i) for i in range(1, 23)), 422, "at most 20"),
        ("study=99999&arm=erf", 404, "no study 99999"),
        ("STUDY&arm=nosuch", 404, "has no arm 'nosuch'"),
        ("STUDY", 422, "at least one"),
        ("trials=1&STUDY&arm=erf", 422, "or a study's arms"),
        ("trials=1&metric=nosuch", 422, "choose one of"),
    ],
)
def test_a_bad_choice_is_refused_with_the_reason(
    api: Api, seeded: Seeded, query: str, status: int, words: str
) -> None:
    query = query.replace("STUDY", f"study={seeded.study_id}")
    got = api.client.get(f"/api/compare?{query}")
    assert got.status_code == status, got.text
    assert words in got.json()["message"]
    if query:  # the page answers the same status, as a page
        page = api.client.get(f"/compare?{query}", headers={"Accept": "text/html"})
        assert page.status_code == status


def test_the_compare_page_without_a_choice_says_how_to_choose(api: Api) -> None:
    page = api.client.get("/compare")
    assert page.status_code == 200 and 'id="compare-trials-form"' in page.text


def test_search_view_has_history_importance_and_pruning(api: Api, search: SeededSearch) -> None:
    got = api.client.get(f"/api/studies/{search.study_id}/search")
    assert got.status_code == 200, got.text
    view = got.json()
    assert view["kind"] == "search" and view["objective"] == "val_acc"
    trials = view["trials"]
    assert [t["order"] for t in trials] == list(range(1, 6))
    assert [t["number"] for t in trials] == list(range(5))  # Optuna's ask order
    by_fn = {t["candidate"]: t for t in trials}
    # pruning: the epoch each pruned trial stopped at, its last reported objective
    for fn, epoch in search.pruned.items():
        t = by_fn[fn]
        assert t["status"] == "PRUNED" and t["pruned_at"] == epoch
        assert t["epochs_run"] == epoch + 1 and t["value"] is None
        assert t["last_value"] == pytest.approx(ACCURACY[fn] - 0.1 * (2 - epoch))
    assert by_fn["erf"]["epochs_run"] == 3 and by_fn["erf"]["pruned_at"] is None
    # history: the best so far never gets worse, and ends at the best trial
    best = [t["best_so_far"] for t in trials if t["best_so_far"] is not None]
    assert best == sorted(best) and best[-1] == pytest.approx(0.82)
    assert view["best"]["candidate"] == "erf" and view["top_arms"][0] == "erf"
    # importance: the properties of the five functions (three completed, two pruned)
    assert view["importance"]["n_candidates"] == 5 and view["importance"]["features"]
    assert view["counts"]["PRUNED"] == 2 and view["counts"]["COMPLETE"] == 3
    # cached like the study's summary: the same state answers 304 to its ETag
    again = api.client.get(
        f"/api/studies/{search.study_id}/search", headers={"If-None-Match": got.headers["etag"]}
    )
    assert again.status_code == 304
    page = api.client.get(f"/studies/{search.study_id}/search")
    assert page.status_code == 200
    for div in ("history-figure", "importance-figure", "pruning-figure", "pruned-trials"):
        assert f'id="{div}"' in page.text, div
    assert 'id="compare-top"' in page.text
    # the study page links to it
    assert 'id="search-link"' in api.client.get(f"/studies/{search.study_id}").text


def test_the_search_view_refuses_other_kinds_and_unknown_studies(api: Api, seeded: Seeded) -> None:
    got = api.client.get(f"/api/studies/{seeded.study_id}/search")
    assert got.status_code == 404 and "property study" in got.json()["message"]
    assert api.client.get("/api/studies/99999/search").status_code == 404
    assert api.client.get(f"/studies/{seeded.study_id}/search").status_code == 404
    assert 'id="search-link"' not in api.client.get(f"/studies/{seeded.study_id}").text


@pytest.mark.postgres
def test_compare_and_search_on_postgresql(make_api: Any, postgres_database_url: str) -> None:
    """The same reads on PostgreSQL (its JSON and IN-list handling are its own)."""
    api = make_api(postgres_database_url)
    search = seed_search_study(api.settings)
    view = api.client.get(f"/api/studies/{search.study_id}/search").json()
    assert view["counts"]["PRUNED"] == 2 and view["best"]["candidate"] == "erf"
    ids = ",".join(str(i) for i in search.trial_ids.values())
    got = api.client.get(f"/api/compare?trials={ids}").json()
    assert len(got["trials"]) == 5 and got["metric"] == "val_acc"
    arms = api.client.get(
        "/api/compare", params={"study": search.study_id, "arm": ["erf", "isru"]}
    ).json()
    assert [len(a["trial_ids"]) for a in arms["arms"]] == [1, 1]
    assert api.client.get(f"/studies/{search.study_id}/search").status_code == 200


@pytest.mark.parametrize("bad", ['{"oops', '"oops"', "[1]"])
def test_corrupt_stored_rows_never_cost_the_answer(
    api: Api, search: SeededSearch, bad: str
) -> None:
    """A trial whose stored axes or curve metrics are not what they should be is shown under
    its function's name with what could be read: 200, never a 500."""
    import sqlalchemy as sa

    tid = search.trial_ids["erf"]
    with api.repo.db.session() as s:
        s.execute(sa.text("UPDATE trials SET axis_values = :b WHERE id = :i"), {"b": bad, "i": tid})
        s.execute(
            sa.text("UPDATE trial_metrics SET metrics = :b WHERE trial_id = :i"),
            {"b": bad, "i": tid},
        )
    view = api.client.get(f"/api/studies/{search.study_id}/search")
    assert view.status_code == 200, view.text
    assert {t["arm"] for t in view.json()["trials"]} >= {"erf", "tanh"}
    got = api.client.get(f"/api/compare?trials={tid},{search.trial_ids['tanh']}")
    assert got.status_code == 200, got.text
    erf = got.json()["trials"][0]
    assert erf["arm"] == "erf" and all(c["metrics"] == {} for c in erf["curves"])
    for url in (f"/studies/{search.study_id}/search", f"/compare?trials={tid}"):
        assert api.client.get(url).status_code == 200, url


def test_closed_reads_close_the_new_pages_too(make_api: Any, sqlite_database_url: str) -> None:
    """With ``public_reads`` off, the comparison and search reads follow the API's read rule:
    401 without a token, 200 with one (the pages answer 401: a page cannot send a token)."""
    api = make_api(sqlite_database_url, public_reads=False)
    search = seed_search_study(api.settings)
    urls = [
        f"/api/studies/{search.study_id}/search",
        f"/api/compare?study={search.study_id}&arm=erf",
    ]
    for url in urls:
        assert api.client.get(url).status_code == 401, url
        assert api.client.get(url, headers=api.auth).status_code == 200, url
    for url in (f"/studies/{search.study_id}/search", "/compare"):
        assert api.client.get(url).status_code == 401, url
