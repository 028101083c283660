"""Learning curves as a long table (``GET /api/studies/{id}/curves``, ``normfree export curves``,
``Client.to_dataframe("curves", ...)``): read back with pandas, every value is the one the trial's
JSON shows, one row per (trial, epoch, metric). Real app, real database (SQLite, and PostgreSQL
where the server runs), a real seeded study."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa

from normfree import Client
from normfree.api import export
from normfree.storage.models import TrialMetricRow
from normfree.testing.seeding import seed_property_study
from tests.api.conftest import Api
from tests.api.test_export import _frame

COLUMNS = list(export.CURVE_COLUMNS)


@pytest.fixture
def study(make_api: Callable[..., Api], database_url: str) -> tuple[Api, int]:
    """An app over a seeded, finished property study (one diverged trial) on each backend."""
    api = make_api(database_url)
    return api, seed_property_study(api.settings).study_id


def _curves(api: Api, sid: int, fmt: str, **params: Any) -> pd.DataFrame:
    return _frame(api, f"/api/studies/{sid}/curves", fmt, **params)


def _expected(trial: dict[str, Any]) -> list[tuple[int, int, str, float]]:
    """(epoch, step, metric, value) per finite value of the trial's JSON curves, in the
    export's order: train_loss, the validation metrics (val_loss among them), lr."""
    out = []
    for p in trial["curves"]:
        values = {"train_loss": p["train_loss"], "val_loss": p["val_loss"], **p["metrics"]}
        values["lr"] = p["lr"]
        out += [(p["epoch"], p["step"], k, v) for k, v in values.items() if v is not None]
    return out


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_curves_round_trip(study: tuple[Api, int], fmt: str) -> None:
    api, sid = study
    df = _curves(api, sid, fmt)
    assert list(df.columns) == COLUMNS
    ids = [t["id"] for t in api.client.get(f"/api/studies/{sid}/trials").json()["items"]]
    assert sorted(set(df["trial_id"])) == ids  # every trial has a curve (the diverged one too)
    for tid, rows in df.groupby("trial_id", sort=True):
        t = api.client.get(f"/api/trials/{tid}").json()
        got = [(r.epoch, r.step, r.metric, r.value) for r in rows.itertuples()]
        want = _expected(t)
        assert len(got) == len(want)
        for (e, s, m, v), (we, ws, wm, wv) in zip(got, want, strict=True):
            assert (e, s, m) == (we, ws, wm) and math.isclose(v, wv, rel_tol=0, abs_tol=1e-12)
        first = rows.iloc[0]
        assert (first.candidate, first.seed, first.status) == (
            t["candidate"],
            t["seed"],
            t["status"],
        )
        walls = {p["epoch"]: p["wall_time_s"] for p in t["curves"]}
        assert all(math.isclose(r.wall_time_s, walls[r.epoch]) for r in rows.itertuples())
    # long form: a pivot gives the wide table a plot wants, one column per metric
    wide = df.pivot_table(index=["trial_id", "epoch"], columns="metric", values="value")
    assert {"train_loss", "val_acc", "lr"} <= set(wide.columns)


def test_curves_of_chosen_trials_and_errors(study: tuple[Api, int]) -> None:
    api, sid = study
    c = api.client
    ids = [t["id"] for t in c.get(f"/api/studies/{sid}/trials").json()["items"]]
    one = _curves(api, sid, "csv", trials=str(ids[1]))
    assert set(one["trial_id"]) == {ids[1]}
    r = c.get(f"/api/studies/{sid}/curves", params={"trials": str(ids[1])})
    assert f'curves-trial-{ids[1]}.csv"' in r.headers["content-disposition"]  # csv by default
    both = c.get(f"/api/studies/{sid}/curves?trials={ids[0]}&trials={ids[2]}&format=json")
    assert both.status_code == 200 and both.headers["content-type"] == "application/json"
    assert {row["trial_id"] for row in both.json()} == {ids[0], ids[2]}
    assert list(both.json()[0]) == COLUMNS
    listed = c.get(f"/api/studies/{sid}/curves", params={"trials": f"{ids[0]},{ids[2]}"})
    assert (
        listed.content
        == c.get(f"/api/studies/{sid}/curves?trials={ids[0]}&trials={ids[2]}").content
    )

    other = seed_property_study(api.settings).study_id
    foreign = c.get(f"/api/studies/{other}/trials").json()["items"][0]["id"]
    r = c.get(f"/api/studies/{sid}/curves", params={"trials": f"{ids[0]},{foreign}"})
    assert r.status_code == 404 and f"no trial {foreign}" in r.json()["message"]
    assert c.get("/api/studies/999/curves").status_code == 404
    assert c.get(f"/api/studies/{sid}/curves", params={"trials": "x"}).status_code == 422
    assert c.get(f"/api/studies/{sid}/curves", params={"format": "xml"}).status_code == 422


def test_curve_cells_never_run_as_formulas(
    study: tuple[Api, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A metric name a spreadsheet would run is written as text (``normfree.csvsafe``, the one
    rule every CSV writer uses), and the client's CSV reader gives the name back."""
    api, sid = study
    tid = api.client.get(f"/api/studies/{sid}/trials").json()["items"][0]["id"]
    with api.repo.db.session() as s:
        s.execute(
            sa.update(TrialMetricRow)
            .where(TrialMetricRow.trial_id == tid, TrialMetricRow.epoch == 0)
            .values(metrics={"=HYPERLINK(1)": 0.25, "-x": -0.5})
        )
    text = api.client.get(f"/api/studies/{sid}/curves", params={"trials": tid}).text
    assert ",'=HYPERLINK(1),0.25" in text and ",'-x,-0.5" in text
    assert "\n=" not in text and ",=" not in text
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)  # as without pyarrow
    frame = Client(http=api.client).to_dataframe("curves", sid, trials=[tid])
    assert {"=HYPERLINK(1)", "-x"} <= set(frame["metric"])
    assert float(frame.loc[frame["metric"] == "-x", "value"].iloc[0]) == -0.5


def test_openapi_documents_the_file(study: tuple[Api, int]) -> None:
    api, _sid = study
    op = api.client.get("/openapi.json").json()["paths"]["/api/studies/{study_id}/curves"]["get"]
    assert {"text/csv", "application/vnd.apache.parquet"} <= set(op["responses"]["200"]["content"])
    assert json.dumps(op).count("trials") >= 1
