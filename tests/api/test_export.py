"""Exports (``?format=csv|parquet``) read back with pandas give the numbers the JSON API gives.

Real app, real database (SQLite, and PostgreSQL where the server runs), a real seeded study; the
files go through HTTP and pandas, the JSON through the same app.
"""

from __future__ import annotations

import io
import math
import statistics
from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest

from normfree.api import export
from normfree.testing.seeding import seed_property_study
from tests.api.conftest import Api, wait_for_analyses


@pytest.fixture
def study(make_api: Callable[..., Api], database_url: str) -> tuple[Api, int]:
    """An app over a seeded, finished property study on each backend."""
    api = make_api(database_url)
    seeded = seed_property_study(api.settings)
    wait_for_analyses(api)
    return api, seeded.study_id


def _frame(api: Api, url: str, fmt: str, **params: Any) -> pd.DataFrame:
    r = api.client.get(url, params={**params, "format": fmt})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith(export.MEDIA_TYPES[fmt].split(";")[0])
    assert f'.{fmt}"' in r.headers["content-disposition"]
    if fmt == "csv":
        return pd.read_csv(io.BytesIO(r.content))
    return pd.read_parquet(io.BytesIO(r.content))


def _same(a: Any, b: Any) -> bool:
    """Equal numbers (NaN in a frame is null in the JSON), or equal values."""
    if b is None:
        return a is None or (isinstance(a, float) and math.isnan(a))
    if isinstance(b, float) or isinstance(a, float):
        return math.isclose(float(a), float(b), rel_tol=0, abs_tol=1e-12)
    return a == b


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_trials_round_trip(study: tuple[Api, int], fmt: str) -> None:
    api, sid = study
    df = _frame(api, f"/api/studies/{sid}/trials", fmt)
    page = api.client.get(f"/api/studies/{sid}/trials", params={"limit": 1000}).json()
    assert list(df["id"]) == [t["id"] for t in page["items"]]
    for row in df.to_dict("records"):
        t = api.client.get(f"/api/trials/{row['id']}").json()
        for col in ("candidate", "seed", "status", "objective_value", "eval_train_loss"):
            assert _same(row[col], t[col]), (col, row[col], t[col])
        for name, value in t["metrics"].items():
            assert _same(row[f"metrics.{name}"], value)
        assert row["config.seed"] == t["config"]["seed"]
        assert row["config.proxy"] == t["config"]["proxy"]
        assert row["config.norm.name"] == t["config"]["norm"]["name"]
        # the diagnostics summary: the last diagnosed epoch, mean and max over the slots
        last = max(d["epoch"] for d in t["diagnostics"])
        slots = [d for d in t["diagnostics"] if d["epoch"] == last]
        assert row["diag.epoch"] == last and row["diag.layers"] == len(slots)
        assert _same(row["diag.alpha_mean"], statistics.fmean(d["alpha"] for d in slots))
        assert _same(row["diag.input_std_max"], max(d["input_std"] for d in slots))


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_arms_round_trip(study: tuple[Api, int], fmt: str) -> None:
    api, sid = study
    df = _frame(api, f"/api/studies/{sid}/arms", fmt)
    cells = api.client.get(f"/api/studies/{sid}", params={"trials": "false"}).json()["cells"]
    arms = api.client.get(f"/api/studies/{sid}/arms").json()
    assert arms["count"] == len(cells) and arms["items"] == cells
    assert list(df["label"]) == [c["label"] for c in cells]
    for row, cell in zip(df.to_dict("records"), cells, strict=True):
        for col in ("n", "n_diverged", "n_total", "mean", "std", "ci_low", "ci_high", "value"):
            assert _same(row[col], cell[col]), (col, row[col], cell[col])
    assert set(df["objective"]) == {"val_acc"}


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_leaderboard_round_trip(study: tuple[Api, int], fmt: str) -> None:
    api, sid = study
    board = api.client.get("/api/leaderboards/vit-tiny").json()
    df = _frame(api, "/api/leaderboards/vit-tiny", fmt)
    assert list(df["candidate"]) == [r["candidate"] for r in board["rows"]]
    for row, arm in zip(df.to_dict("records"), board["rows"], strict=True):
        for col in ("rank", "n", "n_diverged", "mean", "std", "ci_low", "ci_high", "p_vs_best"):
            assert _same(row[col], arm[col]), (col, row[col], arm[col])
        if arm["vs_layernorm"]:
            assert _same(row["vs_layernorm.mean_diff"], arm["vs_layernorm"]["mean_diff"])
    # the filters as the JSON has them
    only = _frame(api, "/api/leaderboards/vit-tiny", fmt, study_id=sid)
    assert len(only) == len(board["rows"])
    group = board["rows"][0]["group"]
    grouped = api.client.get("/api/leaderboards/vit-tiny", params={"group": group}).json()
    frame = _frame(api, "/api/leaderboards/vit-tiny", fmt, group=group)
    assert list(frame["candidate"]) == [r["candidate"] for r in grouped["rows"]]
    assert set(frame["group"]) == {group} and len(frame) < len(board["rows"])


def test_filters_and_errors(study: tuple[Api, int]) -> None:
    api, sid = study
    c = api.client
    r = c.get(f"/api/studies/{sid}/trials", params={"format": "csv", "status": "DIVERGED"})
    df = pd.read_csv(io.BytesIO(r.content))
    assert len(df) == 1 and set(df["status"]) == {"DIVERGED"}
    assert c.get(f"/api/studies/{sid}/trials", params={"format": "xml"}).status_code == 422
    r = c.get(f"/api/studies/{sid}/trials", params={"format": "csv", "cursor": "3"})
    assert r.status_code == 422 and "whole study" in r.json()["message"]
    for url in ("/api/studies/999/trials", "/api/studies/999/arms"):
        r = c.get(url, params={"format": "csv"})
        assert r.status_code == 404 and "no study 999" in r.json()["message"]
    assert c.get("/api/leaderboards/nosuchproxy", params={"format": "csv"}).status_code == 404
    # JSON stays the default and the page stays paged
    assert c.get(f"/api/studies/{sid}/trials", params={"limit": 2}).json()["count"] == 2


def test_parquet_without_pyarrow_is_a_clear_406(
    study: tuple[Api, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    api, sid = study
    monkeypatch.setitem(__import__("sys").modules, "pyarrow", None)
    r = api.client.get(f"/api/studies/{sid}/arms", params={"format": "parquet"})
    assert r.status_code == 406 and "pyarrow" in r.json()["message"]
    assert api.client.get(f"/api/studies/{sid}/arms", params={"format": "csv"}).status_code == 200


def test_csv_cells_never_run_as_formulas() -> None:
    rows = [{"note": "=HYPERLINK(1)", "x": -0.5, "at": "@sum", "ok": "plain"}]
    text = export.to_csv(rows).decode()
    assert "'=HYPERLINK(1)" in text and "'@sum" in text and ",-0.5," in text
    back = pd.read_csv(io.StringIO(text))
    assert back["x"][0] == -0.5


def test_flatten_and_mixed_columns_to_parquet() -> None:
    rows = [
        export.flatten({"a": {"b": 1, "c": {"d": "x"}}, "l": [1, 2], "nan": float("nan")}),
        export.flatten({"a": {"b": "word"}, "e": True}),
    ]
    assert rows[0] == {"a.b": 1, "a.c.d": "x", "l": "[1, 2]", "nan": None}
    df = pd.read_parquet(io.BytesIO(export.to_parquet(rows)))
    assert list(df.columns) == ["a.b", "a.c.d", "l", "nan", "e"]
    assert list(df["a.b"]) == ["1", "word"]


def test_pages_link_their_downloads(study: tuple[Api, int]) -> None:
    """The study page and the leaderboard page link their tables; each link is the export."""
    import html
    import re

    api, sid = study
    c = api.client
    page = c.get(f"/studies/{sid}", headers={"Accept": "text/html"}).text
    links = [html.unescape(h) for h in re.findall(r'href="([^"]*format=[^"]*)"', page)]
    assert len(links) == 4
    cells = c.get(f"/api/studies/{sid}/arms").json()["items"]
    arms_csv = next(u for u in links if "/arms" in u and "format=csv" in u)
    assert len(pd.read_csv(io.BytesIO(c.get(arms_csv).content))) == len(cells)

    board = c.get("/api/leaderboards/vit-tiny", params={"group": "baseline"}).json()
    page = c.get("/", params={"proxy": "vit-tiny", "group": "baseline"}).text
    (csv_link,) = [html.unescape(h) for h in re.findall(r'id="board-csv" href="([^"]*)"', page)]
    assert "group=baseline" in csv_link
    frame = pd.read_csv(io.BytesIO(c.get(csv_link).content))
    assert list(frame["candidate"]) == [r["candidate"] for r in board["rows"]]
