"""Atomic, idempotent candidate writes (issue 28, point 4): 20 clients race through a real
uvicorn server over real SQLite and PostgreSQL. A name is claimed by one INSERT under a unique
constraint, a function by one under the unique canonical key: one racer stores, every other
is told who won (409 for a name taken by another formula, ``duplicate_of`` for the function)."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import httpx
import pytest

from normfree.api import create_app
from normfree.settings import Settings
from normfree.testing.live import app_server

N = 20


def _race(base: str, tokens: list[str], bodies: list[dict[str, str]]) -> list[httpx.Response]:
    """POST every body at once (a barrier lines the clients up), one client (thread and token)
    per body: twenty clients, not one client's twenty requests, which its queue bound refuses
    past four (api.offload)."""
    start = Barrier(len(bodies))

    def post(k: int) -> httpx.Response:
        with httpx.Client(base_url=base, timeout=300) as client:
            start.wait()
            return client.post(
                "/api/candidates", json=bodies[k], headers={"Authorization": f"Bearer {tokens[k]}"}
            )

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(post, range(len(bodies))))


@pytest.fixture
def served(database_url: str):
    app = create_app(Settings(database_url=database_url), run_studies=False, prescreen=False)
    tokens = [app.state.services.repo.create_token(f"racer{k}") for k in range(N)]
    with app_server(app) as base:
        yield base, tokens, app.state.services.repo


@pytest.mark.postgres
def test_twenty_clients_claim_one_name(served) -> None:
    base, tokens, repo = served
    bodies = [{"name": "contested", "formula": f"u/({k + 2}+u**2)"} for k in range(N)]
    answers = _race(base, tokens, bodies)
    codes = Counter(r.status_code for r in answers)
    assert codes == {201: 1, 409: N - 1}, [r.text for r in answers if r.status_code >= 500]
    (winner,) = [r.json() for r in answers if r.status_code == 201]
    assert winner["created"] is True
    assert all(r.json()["error"] == "name_taken" for r in answers if r.status_code == 409)
    stored = repo.get_candidate("contested")
    assert stored["formula"] == winner["formula"]  # what the winner was told is what is stored
    assert len(repo.list_candidates(name_contains="contested")) == 1


@pytest.mark.postgres
def test_twenty_names_for_one_formula_store_one(served) -> None:
    base, tokens, repo = served
    bodies = [{"name": f"twin{k}", "formula": "u/(7+u**2)"} for k in range(N)]
    answers = _race(base, tokens, bodies)
    assert all(r.status_code in (200, 201) for r in answers), [r.text for r in answers]
    created = [r.json() for r in answers if r.json()["created"]]
    assert len(created) == 1
    winner = created[0]["name"]
    assert {r.json()["duplicate_of"] for r in answers if not r.json()["created"]} == {winner}
    assert [c["name"] for c in repo.list_candidates(name_contains="twin")] == [winner]
    # resubmitting the winner's own name and formula is idempotent: nothing stored, 200
    again = httpx.post(
        base + "api/candidates",
        json={"name": winner, "formula": "u/(7+u**2)"},
        headers={"Authorization": f"Bearer {tokens[0]}"},
        timeout=120,
    )
    assert again.status_code == 200 and again.json()["duplicate_of"] == winner


@pytest.mark.postgres
@pytest.mark.parametrize("stored", ["erf", "gen_7"])
def test_twenty_new_names_for_a_catalog_or_generated_function_store_none(
    served, stored: str
) -> None:
    """A catalog entry (as the catalog and generate paths upsert it) or a generated candidate:
    its formula under twenty new names stores nothing, each answer naming the stored row.
    Before upserts wrote the canonical key, only the read-then-check stood between a racer and
    a second row for the function; now the unique key refuses it too."""
    from normfree.search_space import catalog, parse

    base, tokens, repo = served
    if stored == "erf":
        entry = catalog.get("erf")
        repo.upsert_candidate(entry, submitter="catalog")
    else:
        entry = parse("u/(13+u**2)", name=stored)
        repo.upsert_candidate(entry, submitter="generate")
    bodies = [{"name": f"alias{k}", "formula": entry.formula} for k in range(N)]
    answers = _race(base, tokens, bodies)
    assert all(r.status_code == 200 for r in answers), [r.text for r in answers]
    assert {r.json()["duplicate_of"] for r in answers} == {stored}
    assert not any(r.json()["created"] for r in answers)
    assert repo.list_candidates(name_contains="alias") == []


@pytest.mark.postgres
def test_twenty_imports_of_one_reference_set_store_one(served) -> None:
    base, tokens, _repo = served
    start = Barrier(N)

    def post(k: int) -> httpx.Response:
        body = {
            "name": "raced",
            "source": f"client {k}",
            "rows": [
                {"setting": "s", "family": "vit", "metric": "accuracy", "direction": "maximize",
                 "cell": {"function": "tanh"}, "value_low": 80 + k, "value_high": 80 + k},
            ],
        }  # fmt: skip
        with httpx.Client(base_url=base, timeout=300) as client:
            start.wait()
            return client.post(
                "/api/references", json=body, headers={"Authorization": f"Bearer {tokens[k]}"}
            )

    with ThreadPoolExecutor(N) as pool:
        answers = list(pool.map(post, range(N)))
    assert Counter(r.status_code for r in answers) == {201: 1, 409: N - 1}
    (winner,) = [r.json() for r in answers if r.status_code == 201]
    stored = httpx.get(base + "api/references/raced", timeout=60).json()
    assert stored["source"] == winner["source"] and stored["n_rows"] == 1


def test_resubmitting_a_candidate_whose_prescreen_was_lost_runs_it(make_api, tmp_path) -> None:
    """The probe: after a kill the stored prescreen stayed pending, and resubmitting answered
    "duplicate" without ever running it. Now the resubmission asks for it again."""
    import threading
    import time

    from normfree.api.services import candidate_dict
    from normfree.search_space import parse

    api = make_api(f"sqlite:///{tmp_path / 'lost.db'}")
    for t in threading.enumerate():  # the start's re-queue has run (on an empty database)
        if t.name == "normfree-prescreen-requeue":
            t.join(timeout=60)
    formula = "u/(9+u**2)"
    row = candidate_dict(parse(formula, name="lost"))
    # what a killed server left: the row, its prescreen pending, nothing running it
    api.repo.claim_candidate(row, submitter="tester1", prescreen={"status": "pending", "ok": False})
    r = api.client.post(
        "/api/candidates", json={"name": "lost", "formula": formula}, headers=api.auth
    )
    assert r.status_code == 202 and r.json()["duplicate_of"] == "lost", r.text
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        pre = api.repo.get_candidate("lost")["prescreen"]
        if pre["status"] != "pending":
            break
        time.sleep(0.3)
    assert pre["status"] == "done", pre
