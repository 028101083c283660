"""Issue 28, point 6: a name means one thing, and user text is shown as text.

Through the real app on SQLite: the papers' aliases are reserved for user candidates, reference
set names are whole-string matches, plot labels carry no live plotly markup, CSV answers never
start a cell with a spreadsheet formula, and a CSV with a repeated column is refused.
"""

from __future__ import annotations

import csv
import io
from typing import Any

import plotly.graph_objects as go
import pytest

from normfree import csvsafe
from normfree.api import plots
from normfree.specs import BASELINES, NORM_ALIASES, RESERVED_NAMES
from tests.api import bodies
from tests.api.conftest import Api

HOSTILE = '<a href="https://evil.example">x</a><span style="font-size:99px">y</span><b>z</b><br>'
ROW: dict[str, Any] = {
    "setting": "s", "family": "vit", "metric": "accuracy", "direction": "maximize",
    "cell": {"function": "tanh"}, "value_low": 80, "value_high": 80,
}  # fmt: skip


def test_one_list_of_reserved_names() -> None:
    assert {"dyt", "derf", "ln", "rms", "none"} <= RESERVED_NAMES
    assert set(NORM_ALIASES) | set(BASELINES) == RESERVED_NAMES


@pytest.mark.parametrize(
    "name", ["dyt", "derf", "ln", "rms", "none", "DyT", "Derf", "NONE", "layernorm", "RMSNorm"]
)
def test_paper_aliases_are_reserved_for_user_candidates(api: Api, name: str) -> None:
    body = {"name": name, "formula": "u/(1+abs(u))+0.003*u"}
    r = api.client.post("/api/candidates", json=body, headers=api.auth)
    assert r.status_code == 409, r.text
    assert "reserved" in r.json()["message"] and r.json()["detail"]["field"] == "name"
    assert api.repo.get_candidate(name) is None
    form = {**body, "token": api.token}
    page = api.client.post("/submit", data=form, headers={"Accept": "text/html"})
    assert page.status_code == 409 and "reserved" in page.text
    assert api.repo.get_candidate(name) is None


def test_an_alias_inside_a_longer_name_is_fine(api: Api) -> None:
    body = {"name": "dyt2", "formula": "u/(1+abs(u))+0.004*u"}
    assert api.client.post("/api/candidates", json=body, headers=api.auth).status_code in (201, 202)
    assert api.repo.get_candidate("dyt2") is not None


@pytest.mark.parametrize("name", ["published\n", "published\r\n", "mine\n", " mine", "mine "])
def test_reference_names_match_whole(api: Api, name: str) -> None:
    body = {"name": name, "source": "me", "rows": [ROW]}
    r = api.client.post("/api/references", json=body, headers=api.auth)
    assert r.status_code == 422, r.text
    names = [i["name"] for i in api.client.get("/api/references").json()["items"]]
    assert names == ["published"]


def test_reference_name_with_a_newline_in_a_csv_query_is_refused(api: Api) -> None:
    csv_text = "setting,family,metric,direction,function,value\ns,vit,accuracy,maximize,tanh,80\n"
    r = bodies.post_csv(api, "/api/references?name=published%0A&source=S", csv_text)
    assert r.status_code == 422
    assert [i["name"] for i in api.client.get("/api/references").json()["items"]] == ["published"]


def test_plot_labels_are_plain_text() -> None:
    fig = go.Figure(
        go.Scatter(
            x=[HOSTILE, "b"],
            y=[1, 2],
            name=HOSTILE,
            text=[HOSTILE, "ok"],
            customdata=[HOSTILE, "ok"],
            hovertemplate="%{text}<br>value %{y}<extra></extra>",
        )
    )
    fig.update_layout(title=HOSTILE, xaxis_title=HOSTILE)
    fig.add_annotation(text=HOSTILE, x=0, y=0)
    plain = plots.plain_figure(fig)
    trace, layout = plain["data"][0], plain["layout"]
    shown = [trace["name"], *trace["x"], *trace["text"], *trace["customdata"]]
    shown += [layout["title"]["text"], layout["xaxis"]["title"]["text"]]
    shown += [layout["annotations"][0]["text"]]
    for text in shown:
        if text in ("b", "ok"):
            continue
        assert "<" not in text and ">" not in text, text
        assert text.startswith("&lt;a href=")
    assert trace["hovertemplate"] == "%{text}<br>value %{y}<extra></extra>"  # our own markup
    for out in (plots.to_div(fig, "f"), plots.to_json(fig)):
        for live in ("<a href", "<span style", "<b>z"):
            assert live not in out and live.replace("<", "\\u003c") not in out
        assert "&lt;a href" in out or "\\u0026lt;a href" in out


def test_fidelity_and_study_figures_escape_user_settings_and_functions() -> None:
    setting = {
        "setting": HOSTILE, "direction": "maximize", "proxy_metric": "accuracy",
        "metric": HOSTILE, "spearman": 0.5,
        "cells": [
            {"cell": HOSTILE, "reference": {"value": 80, "failed": False, "high": 81},
             "proxy": {"mean": 0.7, "failed": False, "ci_high": 0.72}},
        ],
    }  # fmt: skip
    html = plots.to_div(plots.fidelity_figure(setting), "f")
    assert "<a href" not in html and "<span style" not in html
    cells = [{"function": HOSTILE, "value": 0.5, "mean": 0.7, "ci_low": 0.6, "ci_high": 0.8}]
    fig = plots.study_figure(cells, "accuracy", "shift_h")
    assert HOSTILE not in fig.data[0].hovertemplate  # a label is data, never template text
    assert "<a href" not in plots.to_json(fig)


def test_csv_cells_that_would_be_formulas_are_text() -> None:
    assert csvsafe.cell('=HYPERLINK("http://x")') == '\'=HYPERLINK("http://x")'
    for text in ("+cmd", "-cmd", "@SUM(A1)", "\tx", "\rx"):
        assert csvsafe.cell(text) == "'" + text
        assert csvsafe.uncell(csvsafe.cell(text)) == text
    for text in ("-0.5", "+1e3", "82.3", "tanh", "", "'quoted"):
        assert csvsafe.cell(text) == text and csvsafe.uncell(text) == text


def test_reference_csv_export_is_neutralised_and_round_trips(api: Api) -> None:
    rows = [
        {**ROW, "setting": '=HYPERLINK("http://evil")', "note": "@SUM(1)"},
        {**ROW, "setting": "+s", "cell": {"function": "shift_h(erf, -0.5)"}, "note": "-x"},
    ]
    body = {"name": "evil", "source": "me", "rows": rows}
    assert api.client.post("/api/references", json=body, headers=api.auth).status_code == 201
    out = api.client.get("/api/references/evil?format=csv")
    assert out.status_code == 200
    cells = [c for row in csv.reader(io.StringIO(out.text)) for c in row]
    assert not [c for c in cells if c[:1] in ("=", "+", "@") or c.startswith("-x")], cells
    assert '\'=HYPERLINK("http://evil")' in cells and "shift_h(erf, -0.5)" in cells
    again = bodies.post_csv(api, "/api/references?name=again&source=me", out.text)
    assert again.status_code == 201, again.text
    first = api.client.get("/api/references/evil").json()["rows"]
    second = api.client.get("/api/references/again").json()["rows"]
    assert [r["setting"] for r in second] == [r["setting"] for r in first]
    assert [r["note"] for r in second] == ["@SUM(1)", "-x"]


def test_a_csv_with_a_repeated_column_is_refused(api: Api) -> None:
    text = (
        "setting,family,metric,direction,function,value,value\ns,vit,accuracy,maximize,tanh,80,1\n"
    )
    r = bodies.post_csv(api, "/api/references?name=dup&source=S", text)
    assert r.status_code == 422 and "more than once" in r.json()["message"], r.text
    assert "value" in r.json()["message"]
    assert api.client.get("/api/references/dup").status_code == 404
