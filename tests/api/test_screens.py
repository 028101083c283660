"""``POST /api/screens`` (issue 25, points 4 and 6): a function placed among the 16 search
candidates with the published operator; trials the database already holds are reused."""

from __future__ import annotations

from normfree.search_space.catalog import SEARCH16
from normfree.specs import StudySpec, TrialResult
from normfree.workers.driver import create_study
from normfree.workers.versions import trainer_version
from tests.api.conftest import Api

NEW = "u/(1+abs(u)+u*u)"
ORDER = [*SEARCH16, NEW, "layernorm", "identity"]


def _finish(api: Api, study_id: int) -> None:
    """Every waiting trial 'trained' under this trainer code, valued by its arm."""
    repo = api.repo
    while (lease := repo.lease_next(study_id, "w", 60)) is not None:
        v = 0.9 - 0.02 * ORDER.index(lease.config.norm.name) + 0.001 * lease.config.seed
        result = TrialResult(status="complete", metrics={"val_acc": v}, objective="val_acc",
                             code_version=trainer_version())  # fmt: skip
        assert repo.finish_trial(lease.id, "w", lease.attempt, result)


def test_a_screen_reuses_the_16_and_places_the_function_once_it_ran(api: Api) -> None:
    held = StudySpec(
        kind="options",
        proxy="vit-tiny",
        functions=list(SEARCH16),
        seeds=2,
        options={"shift": ["scalar"]},
        baselines=["layernorm", "identity"],
    )
    held_id = create_study(held, settings=api.settings, request=True)
    _finish(api, held_id)
    body = {"function": NEW, "proxies": ["vit-tiny"], "seeds": 2}
    assert api.client.post("/api/screens", json=body).status_code == 401
    r = api.client.post("/api/screens", json=body, headers=api.auth)
    assert r.status_code == 200, r.text
    one = r.json()["screens"][0]
    assert not one["found_existing"] and one["trials"] == 38
    assert one["reused"] == 36 and one["to_train"] == 2 and one["placement"] is None
    study = api.client.get(f"/api/studies/{one['study_id']}").json()
    assert study["progress"]["reused"] == 36
    assert sum(1 for t in study["trials"] if t["reused_from"]) == 36
    _finish(api, one["study_id"])  # the function's two seeds
    again = api.client.post("/api/screens", json=body, headers=api.auth).json()["screens"][0]
    assert again["found_existing"] and again["study_id"] == one["study_id"]
    p = again["placement"]
    assert p["found"] and p["among_16"] == 17 and p["of"] == 17  # valued below all 16
    assert p["reliability"]["seeds"] == 2 and "rank reliability" in p["text"]
    assert p["text"].startswith(f"{NEW} + s on vit-tiny")
    # one of the 16 screened: the user's study of the 16 is that very screen (names aside),
    # so it is found, not planned again, and the function is placed at once, as itself
    body = {"function": "erf", "proxies": ["vit-tiny"], "seeds": 2}
    erf = api.client.post("/api/screens", json=body, headers=api.auth).json()["screens"][0]
    assert erf["found_existing"] and erf["study_id"] == held_id and erf["to_train"] == 0
    assert erf["placement"]["function"] == "erf" and erf["placement"]["among_16"] == 1
    # the study page says what was reused
    page = api.client.get(f"/studies/{one['study_id']}").text
    assert 'id="reused-line"' in page


def test_a_bad_screen_request_is_a_clear_4xx(api: Api) -> None:
    bad = api.client.post("/api/screens", json={"function": "u/(1+", "proxies": ["vit-tiny"]},
                          headers=api.auth)  # fmt: skip
    assert bad.status_code == 422
    unknown = api.client.post("/api/screens", json={"function": "erf", "proxies": ["nope"]},
                              headers=api.auth)  # fmt: skip
    assert unknown.status_code == 422 and "nope" in unknown.json()["message"]
    one_seed = api.client.post("/api/screens", json={"function": "erf", "seeds": 1},
                               headers=api.auth)  # fmt: skip
    assert one_seed.status_code == 422
