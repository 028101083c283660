"""Verdicts carry their caveats (issue 24, point 4) and a search says what it never tried
(point 5), over REST and on the pages."""

from __future__ import annotations

from normfree.specs import StudySpec, TrialResult
from normfree.testing.seeding import Seeded, property_spec
from normfree.workers.driver import StudyDriver, create_study
from tests.api.conftest import Api


def test_a_two_seed_board_on_a_smoke_preset_says_provisional_and_uncalibrated(
    api: Api, seeded: Seeded
) -> None:
    board = api.client.get(f"/api/leaderboards/vit-tiny?study_id={seeded.study_id}").json()
    cav = board["caveats"]
    # two seeds per arm, one diverged in one cell: an arm ranks on one seed
    assert cav["provisional"] and cav["fewest_seeds"] == 1 and cav["min_seeds"] == 3
    assert not cav["calibrated"] and cav["calibration"] is None
    assert any("provisional" in n for n in cav["notes"])
    assert board["fidelity"]["headline"].startswith("no fidelity headline")
    page = api.client.get("/?proxy=vit-tiny").text
    assert 'id="board-caveats"' in page and "provisional ranking" in page
    assert "not calibrated" in page


def test_a_calibrated_board_without_trials_has_no_provisional_warning(api: Api) -> None:
    board = api.client.get("/api/leaderboards/vit-screen-heldout").json()
    cav = board["caveats"]
    assert cav["calibrated"] and "5/5" in cav["calibration"]
    assert not cav["provisional"] and cav["notes"] == []


def _result(value: float) -> TrialResult:
    return TrialResult(
        status="complete", metrics={"val_acc": value}, objective="val_acc", direction="maximize"
    )


def test_search_study_says_which_functions_it_never_tried(api: Api) -> None:
    functions = ["erf", "tanh", "arctan", "isru"]
    spec = StudySpec(
        kind="search", proxy="vit-tiny", functions=functions, sampler="tpe", n_trials=3, epochs=1
    )
    study_id = create_study(spec, settings=api.settings)
    driver = StudyDriver(study_id, settings=api.settings)
    repo = driver.store.repo
    while driver.kind.refill(driver):  # the driver's loop, each trial 'trained' at once
        leased = repo.lease_next(study_id, driver.owner, 30.0)
        if leased is not None:
            repo.finish_trial(leased.id, driver.owner, leased.attempt, _result(0.5))
            driver.tell(leased.optuna_number, "COMPLETE", 0.5)
    repo.set_study_status(study_id, "complete")
    detail = api.client.get(f"/api/studies/{study_id}").json()
    search = detail["search"]
    assert search["never_tried"] == ["isru"] and search["n_trials"] == 3
    why = {f["function"]: (f["status"], f["reason"]) for f in search["functions"]}
    assert why["erf"] == ("trained", None)
    assert why["isru"][0] == "never tried" and "budget exhausted" in why["isru"][1]
    assert detail["generate"] is None
    page = api.client.get(f"/studies/{study_id}").text
    assert 'id="search-coverage"' in page and "Never tried: isru" in page
    assert "budget exhausted" in page


def test_runs_ending_near_chance_are_failures_in_fidelity_on_a_smoke_preset(api: Api) -> None:
    # vit-tiny's trainer calls every finished run complete (min_learning 0); fidelity must not
    spec = property_spec(functions=["erf"], values=[-2.0, 0.0, 2.0])
    study_id = create_study(spec, settings=api.settings)
    driver = StudyDriver(study_id, settings=api.settings)
    repo = driver.store.repo
    while (leased := repo.lease_next(study_id, "t", 30.0)) is not None:
        shift = leased.axis_values.get("shift_h")
        acc = 0.1 if shift in (-2.0, 2.0) else 0.8 + 0.01 * leased.config.seed
        assert repo.finish_trial(leased.id, "t", leased.attempt, _result(acc))
    repo.set_study_status(study_id, "complete")
    rep = api.client.get(f"/api/fidelity?study_id={study_id}").json()
    cells = {c["cell"]: c["proxy"] for s in rep["settings"] for c in s["cells"]}
    assert cells["shift_h(erf, 2)"]["failed"] and cells["shift_h(erf, -2)"]["failed"]
    assert not cells["erf"]["failed"]
    board = api.client.get(f"/api/leaderboards/vit-tiny?study_id={study_id}").json()
    assert set(board["caveats"]["near_chance"]) == {"shift_h(erf, -2)", "shift_h(erf, 2)"}
    # the study itself says so too, over REST and on its page (its trainer called them complete)
    detail = api.client.get(f"/api/studies/{study_id}?trials=false").json()
    assert set(detail["caveats"]["near_chance"]) == {"erf @ -2.0", "erf @ 2.0"}, detail["caveats"]
    page = api.client.get(f"/studies/{study_id}").text
    assert 'id="study-caveats"' in page and "ended near chance" in page and "erf @ 2.0" in page
    # and the function's page, where its transforms' rows say it beside their rank
    page = api.client.get("/candidates/erf").text
    assert "near chance" in page and "failed to train (a failure in fidelity)" in page
    rows = api.client.get("/api/candidates/shift_h(erf, 2)/results").json()
    assert rows and all(r["near_chance"] for r in rows if r["proxy"] == "vit-tiny"), rows
    assert not any(r["near_chance"] for r in api.client.get("/api/candidates/erf/results").json())


def test_an_arm_with_a_heavy_tailed_slope_is_named_on_every_view_of_its_board(
    api: Api, tmp_path
) -> None:
    """exproot's place on a CPU screen is its gradient noise, not its shape (diagnoses 2f): the
    board says so over REST, on its page and in the CLI, by the function's own property (its
    catalog entry: a board read from storage carries no properties for catalog functions)."""
    import json

    from normfree.testing.live import run_cli

    spec = StudySpec(
        kind="options", proxy="vit-tiny", functions=["exproot", "erf"],
        options={"shift": ["scalar"]}, seeds=3, epochs=1,
    )  # fmt: skip
    study_id = create_study(spec, settings=api.settings)
    repo = StudyDriver(study_id, settings=api.settings).store.repo
    while (leased := repo.lease_next(study_id, "t", 30.0)) is not None:
        acc = (0.5 if leased.config.norm.name == "exproot" else 0.8) + 0.01 * leased.config.seed
        assert repo.finish_trial(leased.id, "t", leased.attempt, _result(acc))
    repo.set_study_status(study_id, "complete")
    board = api.client.get(f"/api/leaderboards/vit-tiny?study_id={study_id}").json()
    cav = board["caveats"]
    assert cav["heavy_tailed"] == ["exproot + s"], cav
    assert any("gradient noise" in n and "exproot" in n for n in cav["notes"])
    page = api.client.get("/?proxy=vit-tiny").text
    assert 'id="board-caveats"' in page and "placed by gradient noise" in page
    assert ">heavy tailed slope<" in page  # the row's own badge
    cli = run_cli(
        ["leaderboard", "--proxy", "vit-tiny", "--study", str(study_id), "--json"],
        api.settings.database_url,
    )
    assert cli.returncode == 0, cli.stderr
    out = json.loads(cli.stdout)
    assert out["caveats"]["heavy_tailed"] == ["exproot + s"], out["caveats"]
    detail = api.client.get(f"/api/studies/{study_id}?trials=false").json()
    assert [c for c in detail["caveats"]["heavy_tailed"] if "exproot" in c], detail["caveats"]
    assert "placed by gradient noise" in api.client.get(f"/studies/{study_id}").text
