"""Dashboard pages through real HTTP: each renders, embeds its plotly figures, and the form works.

The figures' content is checked on the plotly JSON the pages embed (what the browser draws);
the real-browser test (test_browser.py) checks that plotly.js turns them into SVG.
"""

from __future__ import annotations

import json
import re

from normfree.testing.seeding import Seeded
from tests.api import bodies
from tests.api.conftest import Api

HTML = {"Accept": "text/html"}


def _figures(html: str) -> list[dict]:
    """The plotly figures embedded in a page (the data and layout given to Plotly.newPlot)."""
    dec = json.JSONDecoder()
    out = []
    for m in re.finditer(r'Plotly\.newPlot\(\s*"([^"]+)",\s*', html):
        data, end = dec.raw_decode(html, m.end())
        end = html.index("{", end)
        layout, _ = dec.raw_decode(html, end)
        out.append({"id": m.group(1), "data": data, "layout": layout})
    return out


def test_plotly_js_is_served_locally(api: Api) -> None:
    r = api.client.get("/vendor/plotly.min.js")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/javascript")
    assert len(r.content) > 1_000_000 and b"plotly" in r.content[:2000].lower()
    page = api.client.get("/", headers=HTML).text
    assert '<script src="http://testserver/vendor/plotly.min.js">' in page
    assert "cdn" not in page.lower()
    assert api.client.get("/static/app.js").status_code == 200


def test_leaderboard_page(api: Api, seeded: Seeded) -> None:
    r = api.client.get("/?proxy=vit-tiny", headers=HTML)
    assert r.status_code == 200
    html = r.text
    assert 'id="leaderboard"' in html and 'class="sortable"' in html
    assert "layernorm" in html and "shift_h(erf, 0)" in html
    assert 'class="badge good">best<' in html  # best-vs-rest significance
    assert "zero centred" in html  # properties as badges
    assert 'class="badge bad">1<' in html  # the diverged count
    figs = _figures(html)
    assert [f["id"] for f in figs] == ["lb-figure"]
    trace = figs[0]["data"][0]
    assert trace["y"][0] == "layernorm" and trace["error_x"]["visible"] is True
    filtered = api.client.get("/?proxy=vit-tiny&group=baseline", headers=HTML).text
    assert "shift_h(erf, 0)" not in filtered and "layernorm" in filtered
    empty = api.client.get("/?proxy=dit-tiny", headers=HTML).text
    assert "No finished trials" in empty


def test_study_page_plots_metric_vs_transform_value(api: Api, seeded: Seeded) -> None:
    html = api.client.get(f"/studies/{seeded.study_id}", headers=HTML).text
    figs = _figures(html)
    assert [f["id"] for f in figs] == ["study-figure"]
    traces = {t["name"]: t for t in figs[0]["data"]}
    assert set(traces) == {"erf", "tanh", "diverged"}
    assert traces["erf"]["x"] == [-1.0, 0.0, 1.0] and "error_y" in traces["erf"]
    assert traces["diverged"]["x"] == [1.0] and traces["diverged"]["marker"]["symbol"] == "x"
    assert "shift_h value" in figs[0]["layout"]["xaxis"]["title"]["text"]
    assert "watchStudy(" not in html  # finished: no polling
    # how far to trust it: the study's own fidelity (its erf/tanh/LayerNorm cells are published
    # cells) and a link to the proxy's
    line = html.split('id="fidelity-line"', 1)[1].split("</p>", 1)[0]
    # vit-tiny is not calibrated: the line says so instead of quoting figures
    assert "no fidelity headline" in line and "not calibrated" in line
    assert "published orders reproduced" not in line
    # its reliability is of the cells the report compares, not the study's (the next line's)
    assert "among the cells it compares, rank reliability" in line
    assert f"/fidelity?study_id={seeded.study_id}" in line and "/fidelity?proxy=vit-tiny" in line
    fig_json = api.client.get(f"/studies/{seeded.study_id}/figure.json").json()
    assert {t["name"] for t in fig_json["data"]} == {"erf", "tanh", "diverged"}
    assert api.client.get("/studies", headers=HTML).status_code == 200


def test_running_study_page_polls_for_progress(api: Api) -> None:
    body = bodies.study(transform="shift_v", values=[0, 1])
    sid = api.client.post("/api/studies", json=body, headers=api.auth).json()["id"]
    html = api.client.get(f"/studies/{sid}", headers=HTML).text
    assert f"watchStudy({sid}" in html and 'id="progress-bar"' in html


def test_study_page_names_the_settings_its_study_set(api: Api) -> None:
    """A study made to fail with ``--lr 10`` did not say so on its page (the journey)."""
    body = bodies.study(transform="shift_v", values=[0, 1], epochs=2, params={"lr": 10.0})
    sid = api.client.post("/api/studies", json=body, headers=api.auth).json()["id"]
    text = re.sub(r"\s+", " ", api.client.get(f"/studies/{sid}", headers=HTML).text)
    assert "2 epochs; trained with lr=10.0;" in text
    # one of a thing reads as one (the journey: "1 epochs")
    body = bodies.study(transform="shift_v", values=[0, 1], epochs=1, seeds=1)
    sid = api.client.post("/api/studies", json=body, headers=api.auth).json()["id"]
    text = re.sub(r"\s+", " ", api.client.get(f"/studies/{sid}", headers=HTML).text)
    assert "; 1 seed; 1 epoch;" in text


def test_trial_page_figures(api: Api, seeded: Seeded) -> None:
    html = api.client.get(f"/trials/{seeded.trial_ids[0]}", headers=HTML).text
    figs = {f["id"]: f for f in _figures(html)}
    assert set(figs) == {"curves-figure", "alpha-figure", "layers-figure"}
    names = {t["name"] for t in figs["curves-figure"]["data"]}
    assert {"train loss", "val loss", "val_acc"} <= names
    alpha = figs["alpha-figure"]["data"]
    assert {t["name"] for t in alpha} >= {"blocks.0.norm1", "norm_final", "alpha = 1/std"}
    assert len(figs["layers-figure"]["data"]) == 2  # gamma and branch norm


def test_trial_page_shows_divergence_and_first_spike(api: Api, seeded: Seeded) -> None:
    html = api.client.get(f"/trials/{seeded.diverged_trial_ids[0]}", headers=HTML).text
    assert "diverged at step 7" in html and "first loss spike at step 6" in html
    clean = api.client.get(f"/trials/{seeded.trial_ids[0]}", headers=HTML).text
    assert "first loss spike" not in clean and "diverged at step" not in clean


def test_candidate_pages(api: Api, seeded: Seeded) -> None:
    html = api.client.get("/candidates/shift_h(erf, 0)", headers=HTML).text
    figs = _figures(html)
    assert figs and {t["name"] for t in figs[0]["data"]} == {
        "shift_h(erf, 0)(u)",
        "shift_h(erf, 0)'(u)",
    }
    assert "Results across proxies" in html and "vit-tiny" in html
    listing = api.client.get("/candidates", headers=HTML).text
    assert "smoothsign" in listing
    missing = api.client.get("/candidates/nope", headers=HTML)
    assert missing.status_code == 404 and "no candidate nope" in missing.text


def test_submit_form_needs_a_token_and_shows_the_result(api: Api) -> None:
    c = api.client
    assert 'name="token"' in c.get("/submit", headers=HTML).text
    form = {"name": "formsquash", "formula": "u/(1+abs(u))", "description": "", "token": ""}
    r = c.post("/submit", data=form, headers=HTML)
    assert r.status_code == 401 and "needs a token" in r.text
    r = c.post("/submit", data={**form, "token": "nf_wrong"}, headers=HTML)
    assert r.status_code == 403
    r = c.post("/submit", data={**form, "token": api.token}, headers=HTML)
    assert r.status_code == 200, r.text
    assert 'id="submit-result"' in r.text and "smoothsign" in r.text  # a duplicate
    r = c.post(
        "/submit",
        data={**form, "formula": "tanh(u)*exp(-u**2/8)", "token": api.token},
        headers=HTML,
    )
    assert r.status_code == 201 and "Stored" in r.text and _figures(r.text)
    assert api.token not in r.text  # the token is not echoed back
    bad = c.post(
        "/submit", data={**form, "formula": "u/(1+abs(u)", "token": api.token}, headers=HTML
    )
    assert bad.status_code == 422 and "at position 11" in bad.text
    assert 'value="u/(1+abs(u)"' in bad.text  # the user's input is kept
    badname = c.post("/submit", data={**form, "name": "9x", "token": api.token}, headers=HTML)
    assert badname.status_code == 422 and "name:" in badname.text
