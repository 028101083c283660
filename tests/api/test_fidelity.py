"""Reference sets and fidelity over REST and on the pages (real HTTP, real database)."""

from __future__ import annotations

import pytest

from normfree.testing.seeding import Seeded, seed_property_study
from tests.api import bodies
from tests.api.conftest import Api

CSV = (
    "setting,family,metric,direction,resolution,function,shift,alpha,value,failed,note\n"
    "mini,vit,accuracy,maximize,0.2,layernorm,,,82.3,,\n"
    "mini,vit,accuracy,maximize,0.2,erf,scalar,,82.8,,\n"
    'mini,vit,accuracy,maximize,0.2,"shift_h(erf, 2)",,,failed,,\n'
)


def test_builtin_set_is_listed_and_shown(api: Api) -> None:
    listing = api.client.get("/api/references").json()
    assert listing["items"][0]["name"] == "published" and listing["items"][0]["builtin"]
    detail = api.client.get("/api/references/published").json()
    assert len(detail["rows"]) == detail["n_rows"] > 40
    derf = next(r for r in detail["rows"] if r["cell_label"] == "erf + s")
    assert derf["value"] == 82.8
    csv = api.client.get("/api/references/published?format=csv")
    assert csv.headers["content-type"].startswith("text/csv") and "setting,family" in csv.text
    assert api.client.get("/api/references/nope").status_code == 404


def test_import_json_and_csv_with_a_token(api: Api) -> None:
    body = bodies.reference()
    assert api.client.post("/api/references", json=body).status_code == 401
    r = api.client.post("/api/references", json=body, headers=api.auth)
    assert r.status_code == 201, r.text
    assert r.json()["submitter"] == "tester1" and r.json()["n_rows"] == 1
    assert api.client.post("/api/references", json=body, headers=api.auth).status_code == 409
    r = bodies.post_csv(api, "/api/references?name=mini&source=S", CSV)
    assert r.status_code == 201, r.text
    assert r.json()["settings"] == ["mini"]
    names = [i["name"] for i in api.client.get("/api/references").json()["items"]]
    assert names == ["published", "mine", "mini"]


def test_bad_rows_are_refused_whole_with_reasons(api: Api) -> None:
    bad = CSV + "mini,vit,accuracy,maximize,0.2,erff,,,80,,\n"
    bad += "mini,vit,accuracy,up,0.2,tanh,,,1,,\n"
    r = bodies.post_csv(api, "/api/references?name=bad&source=S", bad)
    assert r.status_code == 422, r.text
    msg = r.json()["message"]
    assert "row 4" in msg and "erff" in msg and "row 5" in msg
    assert api.client.get("/api/references/bad").status_code == 404  # nothing stored
    r = bodies.post_csv(api, "/api/references", b"\xff\xfe")
    assert r.status_code == 422
    r = api.client.post(
        "/api/references", content=b"x", headers={**api.auth, "Content-Type": "text/plain"}
    )
    assert r.status_code == 415
    r = api.client.post("/api/references", json=[1, 2], headers=api.auth)
    assert r.status_code == 422


@pytest.fixture
def seeded_study(api: Api) -> Seeded:
    return seed_property_study(api.settings)


def test_fidelity_of_a_study_over_rest_and_beside_its_leaderboard(
    api: Api, seeded_study: Seeded
) -> None:
    sid = seeded_study.study_id
    rep = api.client.get(f"/api/fidelity?study_id={sid}").json()
    assert rep["family"] == "vit" and rep["subject"]["study_id"] == sid
    settings = {s["setting"]: s for s in rep["settings"]}
    # the seeded shift study: erf at 0 beats erf at +-1, as the Derf paper's section 3 says
    shift = settings["ViT-B top-1 change, horizontal shift of erf"]
    cells = {c["cell"] for c in shift["cells"]}
    assert {"erf", "shift_h(erf, 1)", "shift_h(erf, -1)"} <= cells
    assert shift["pairs_resolvable"] == 2 and shift["pairs_agree"] == 2
    assert rep["summary"]["pairs_resolvable"] >= 4
    # vit-tiny is a smoke preset, never calibrated: the figures stay, the headline is no verdict
    assert not rep["calibrated"] and rep["caveats"]
    assert rep["headline"].startswith("no fidelity headline")
    assert "orders reproduced" not in rep["headline"]
    board = api.client.get(f"/api/leaderboards/vit-tiny?study_id={sid}").json()
    assert board["fidelity"]["pairs_resolvable"] == rep["summary"]["pairs_resolvable"]
    assert board["fidelity"]["url"] == f"/fidelity?study_id={sid}"
    assert board["fidelity"]["calibrated"] is False
    # errors: one of proxy/study, known names
    assert api.client.get("/api/fidelity").status_code == 422
    assert api.client.get("/api/fidelity?proxy=nope").status_code == 404
    assert api.client.get("/api/fidelity?study_id=999").status_code == 404
    assert api.client.get(f"/api/fidelity?study_id={sid}&reference=nope").status_code == 404


def test_fidelity_page_and_leaderboard_line(api: Api, seeded_study: Seeded) -> None:
    sid = seeded_study.study_id
    page = api.client.get(f"/fidelity?study_id={sid}")
    assert page.status_code == 200
    html = page.text
    assert 'id="fidelity-summary"' in html and "horizontal shift of erf" in html
    assert 'id="fidelity-figure-0"' in html
    assert 'id="fidelity-caveats"' in html and "not calibrated" in html
    board = api.client.get("/?proxy=vit-tiny").text
    assert 'id="fidelity-line"' in board
    assert api.client.get("/fidelity").status_code == 200
