"""Any arm name reaches its page and back (issue 24, point 2): pages address candidates by the
name percent-encoded into a ``{name:path}`` segment (``api.links``), so names holding "/", "%",
"#", "?", quotes, spaces or unicode render on every page and every link resolves to the page of
the same name. Real HTTP through the app; arms stored as a worker stores them."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from markupsafe import escape

from normfree.specs import NormSpec, StudySpec, TrialConfig
from normfree.testing.seeding import synthetic_result
from tests.api.conftest import Api

HTML = {"Accept": "text/html"}


def esc(text: str) -> str:
    """``text`` as the templates escape it."""
    return str(escape(text))


PROXY = "vit-tiny"

# stored candidates (a user name may not hold these characters today; a row written by an older
# version, or by hand, may) and one formula that only the catalog's parser resolves
ODD_NAMES = [
    "ratio/2",
    "/lead",
    "a/../b",
    "pct%25x",
    "hash#tag",
    "what?x=1&y=2",
    "quo\"te's",
    "spa ce+plus",
    "ünïcødé-✓",
]
FORMULA = "u/(1+abs(u))"


def store_arms(repo: Any, arms: dict[str, str], seeds: int = 2, **study: Any) -> int:
    """A finished study whose arms end as ``arms`` says (complete, diverged or failed), written
    through the lease as a worker writes them; returns the study id."""
    spec = StudySpec(
        kind="options", proxy=PROXY, seeds=seeds, functions=list(arms), epochs=1, **study
    )
    sid = repo.create_study(spec)
    items = [
        (TrialConfig(proxy=PROXY, norm=NormSpec(name=n), seed=s, epochs=1), {"function": n}, None)
        for n in arms
        for s in range(seeds)
    ]
    repo.add_trials(sid, items)
    repo.set_study_status(sid, "running")
    while (leased := repo.lease_next(sid, "w", 600.0)) is not None:
        fn = leased.config.norm.name
        outcome = arms[fn]
        if outcome == "failed":
            reason = f"attempt {leased.attempt}: configuration error: unknown catalog name {fn!r}"
            assert repo.fail_trial(leased.id, "w", leased.attempt, reason)
        else:
            result = synthetic_result(fn, None, leased.config.seed, outcome == "diverged")
            assert repo.finish_trial(leased.id, "w", leased.attempt, result)
    return sid


def _hrefs(page: str) -> list[str]:
    return [html.unescape(h) for h in re.findall(r'href="([^"]+)"', page)]


@pytest.fixture
def odd(api: Api) -> int:
    for name in ODD_NAMES:
        api.repo.upsert_candidate(
            {"name": name, "formula": "tanh(u)", "canonical": "tanh(u)", "group": "odd"}
        )
    sid = store_arms(api.repo, dict.fromkeys([*ODD_NAMES, FORMULA], "complete"))
    api.repo.set_study_status(sid, "complete")
    return sid


def test_every_page_answers_and_links_resolve_back(api: Api, odd: int) -> None:
    c = api.client
    trial_ids = [t["id"] for t in c.get(f"/api/studies/{odd}/trials?limit=100").json()["items"]]
    pages = [
        "/",
        f"/?proxy={PROXY}",
        "/candidates",
        "/studies",
        f"/studies/{odd}",
        f"/fidelity?proxy={PROXY}",
        f"/fidelity?study_id={odd}",
        *(f"/trials/{t}" for t in trial_ids),
    ]
    linked: dict[str, set[str]] = {}
    for url in pages:
        r = c.get(url, headers=HTML)
        assert r.status_code == 200, (url, r.text[:500])
        for href in _hrefs(r.text):
            if href.startswith("http://testserver/candidates/"):
                linked.setdefault(href, set()).add(url)
    names = {*ODD_NAMES, FORMULA}
    # every odd name is linked from the leaderboard, the study page and the candidates list
    seen = set()
    for href, where in linked.items():
        r = c.get(href, headers=HTML)
        assert r.status_code == 200, (href, where, r.text[:300])
        title = re.search(r"<h1>(.*?) <span", r.text, re.S)
        assert title, href
        seen.add(html.unescape(title.group(1)))
    assert names <= seen
    for name in names:
        where = {u for h, us in linked.items() for u in us if h.endswith(_key(name))}
        assert {f"/?proxy={PROXY}", "/", f"/studies/{odd}"} <= where, (name, where)
        assert any(u.startswith("/trials/") for u in where), name  # each trial links its arm
    assert {u for h, us in linked.items() for u in us if h.endswith(_key("hash#tag"))} >= {
        "/candidates"
    }


def _key(name: str) -> str:
    from normfree.api.links import candidate_key

    return "/candidates/" + candidate_key(name)


def test_candidate_page_shows_its_results_for_an_odd_name(api: Api, odd: int) -> None:
    for name in ODD_NAMES:
        r = api.client.get(_key(name), headers=HTML)
        assert r.status_code == 200, name
        assert f"<h1>{esc(name)} " in r.text
        # its results across proxies are its own, found by its stored name
        section = r.text.split("Results across proxies", 1)[1]
        assert esc(name) in section and PROXY in section, name
    # a name that was never stored answers as any unknown name does: no page to show
    assert api.client.get("/candidates/nosuchname", headers=HTML).status_code == 404
    refused = api.client.get("/candidates/no-such%2Fname", headers=HTML)
    assert refused.status_code == 422 and "formula rejected" in refused.text


def test_the_json_api_answers_every_name_its_pages_answer(api: Api, odd: int) -> None:
    """``GET /api/candidates/{name}`` and ``.../results`` take the pages' key: a formula with
    "/" (``u/(1+abs(u))``) answered 404 "no route" there, since the server decodes "%2F" before
    it routes; now the route's name is a ``{name:path}`` as the page's is."""
    from normfree.api.links import candidate_key

    for name in [*ODD_NAMES, FORMULA, "u/(2+abs(u))"]:
        r = api.client.get(f"/api/candidates/{candidate_key(name)}")
        assert r.status_code == 200, (name, r.text[:300])
        assert r.json()["name"] == name
        results = api.client.get(f"/api/candidates/{candidate_key(name)}/results")
        assert results.status_code == 200, (name, results.text[:300])
        assert (name == "u/(2+abs(u))") == (results.json() == [])  # ran in ``odd``'s study
    assert api.client.get("/api/candidates/u%2F(2%2Babs(u))").json()["canonical"] == (
        "u/(Abs(u) + 2)"
    )
    refused = api.client.get("/api/candidates/no-such%2Fname")
    assert refused.status_code == 422, refused.text  # a formula the parser rejects, not a route


def test_the_key_survives_a_literal_percent_sequence() -> None:
    from normfree.api.links import candidate_key

    # "%25" in a name is three characters, not an escaped "%": it must not decode twice
    assert candidate_key("pct%25x") == "pct%2525x"
    assert candidate_key("a/b?c#d") == "a%2Fb%3Fc%23d"


@pytest.mark.browser
def test_odd_names_round_trip_through_a_real_server_and_browser(tmp_path: Any) -> None:
    """The same round trip through ``normfree serve`` (uvicorn decodes the path once, where the
    test client decodes it twice) and a real Chromium that clicks each leaderboard link."""
    import httpx

    from normfree import storage
    from normfree.settings import Settings
    from normfree.testing.live import live_server
    from tests.api.browser import chromium, need_chromium

    need_chromium()

    url_db = f"sqlite:///{tmp_path / 'normfree.db'}"
    store = storage.open(Settings(database_url=url_db))
    for name in ODD_NAMES:
        store.repo.upsert_candidate({"name": name, "formula": "tanh(u)", "group": "odd"})
    sid = store_arms(store.repo, dict.fromkeys([*ODD_NAMES, FORMULA], "complete"))
    store.repo.set_study_status(sid, "complete")
    with live_server(url_db) as base:
        for page in ("", f"?proxy={PROXY}", "candidates", "studies", f"studies/{sid}"):
            assert httpx.get(base + page, timeout=30).status_code == 200, page
        for name in [*ODD_NAMES, FORMULA]:
            from normfree.api.links import candidate_key

            r = httpx.get(base + "candidates/" + candidate_key(name), timeout=30)
            assert r.status_code == 200 and f"<h1>{esc(name)} " in r.text, name
        with chromium(tmp_path) as tab:
            page = tab.page
            for name in [*ODD_NAMES, FORMULA]:
                page.goto(base + f"?proxy={PROXY}")
                page.locator("#leaderboard").get_by_role("link", name=name, exact=True).click()
                page.wait_for_load_state()
                assert page.locator("h1").inner_text().startswith(name), name
