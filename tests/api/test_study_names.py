"""REST accepts exactly what the workers can train: a submitted candidate by name and nested
transforms of formulas, in property and options studies (issue 24, point 1)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from normfree.specs import TrialConfig
from tests.api.conftest import Api

SOFTSIGN15 = "1.5*u/(1+abs(u))"


@pytest.fixture
def quiet_api(make_api: Callable[..., Api], sqlite_database_url: str) -> Api:
    """The app without background prescreens (this test is about names, not prescreens)."""
    return make_api(sqlite_database_url, prescreen=False)


def _submit(api: Api) -> None:
    r = api.client.post(
        "/api/candidates", json={"name": "softsign15", "formula": SOFTSIGN15}, headers=api.auth
    )
    assert r.status_code in (200, 201, 202), r.text
    assert api.repo.get_candidate("softsign15") is not None


@pytest.mark.parametrize(
    "body",
    [
        {
            "kind": "property",
            "functions": ["erf", "softsign15", "u/(1+abs(u))"],
            "transform": "shift_h",
            "values": [0.5],
        },
        {
            "kind": "options",
            "functions": ["softsign15", "flat_centre(u/(1+abs(u)), 1)", "shift_h(softsign15, 0.5)"],
            "options": {"alpha0": [1.0]},
        },
    ],
    ids=["property", "options"],
)
def test_a_stored_name_and_a_transformed_formula_are_accepted_and_train(
    quiet_api: Api, body: dict
) -> None:
    from normfree.workers.trainer import train_trial

    api = quiet_api
    _submit(api)
    study = {"proxy": "vit-tiny", "seeds": 1, "epochs": 1, "baselines": [], **body}
    r = api.client.post("/api/studies", json=study, headers=api.auth)
    assert r.status_code == 201, r.text
    rows = api.repo.list_trials(r.json()["id"])
    assert len(rows) == len(body["functions"])
    for row in rows:
        config = TrialConfig.model_validate(row["config"])
        if "softsign15" in config.norm.name:
            assert SOFTSIGN15 in (config.norm.formula or "")  # baked: no database on the worker
    # Each trial trains as a worker would run it (1 epoch of vit-tiny, a few seconds each).
    for row in rows:
        result = train_trial(TrialConfig.model_validate(row["config"]), threads=1)
        assert result.status in ("complete", "diverged"), (row["candidate"], result.error)


@pytest.mark.parametrize(
    ("functions", "near"),
    [(["erff"], "did you mean 'erf'"), (["softsing15"], "did you mean 'softsign15'")],
)
def test_a_typo_is_422_with_the_nearest_name_and_nothing_is_written(
    quiet_api: Api, functions: list[str], near: str
) -> None:
    api = quiet_api
    _submit(api)
    study = {"kind": "options", "proxy": "vit-tiny", "functions": functions}
    r = api.client.post(
        "/api/studies", json={**study, "options": {"alpha0": [1.0]}}, headers=api.auth
    )
    assert r.status_code == 422, r.text
    assert near in r.json()["message"]
    assert api.client.get("/api/studies").json()["count"] == 0


def test_every_cell_is_validated_not_only_the_first(quiet_api: Api) -> None:
    study = {
        "kind": "property",
        "proxy": "vit-tiny",
        "functions": ["erf", "tanh"],
        "transform": "flat_centre",
        "values": [1, -1],
    }
    r = quiet_api.client.post("/api/studies", json=study, headers=quiet_api.auth)
    assert r.status_code == 422, r.text
    problems = r.json()["detail"]["problems"]
    assert any("flat_centre(tanh, -1)" in p for p in problems), problems
    assert quiet_api.client.get("/api/studies").json()["count"] == 0
