"""Rank reliability beside every leaderboard and fidelity report (issue 25, point 1): the
REST answers, the pages and the CLI all show the split-seed reliability of the arms they rank,
with the seeds that would bring it to 0.8."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from normfree.cli import main
from tests.api.conftest import Api
from tests.boards import seed_board

# four arms the published set knows (ViT), four paired seeds; the order holds on every seed
# but the last, where tanh and arctan swap: reliable, not perfectly
VALUES = {
    "layernorm": [0.90, 0.91, 0.905, 0.90],
    "erf": [0.85, 0.86, 0.855, 0.84],
    "tanh": [0.80, 0.81, 0.805, 0.76],
    "arctan": [0.75, 0.76, 0.755, 0.77],
}


def _check(rel: dict) -> None:
    assert rel["seeds"] == 4 and rel["arms"] == 4
    assert 0.5 < rel["reliability"] <= 1.0
    assert rel["seeds_for_target"] is not None and rel["target"] == 0.8
    assert rel["text"].startswith("rank reliability ") and "at 4 seeds over 4 arms" in rel["text"]


def test_leaderboard_and_fidelity_show_reliability_over_rest_and_pages(api: Api) -> None:
    sid = seed_board(api.settings.database_url, VALUES.items())
    board = api.client.get("/api/leaderboards/vit-tiny").json()
    _check(board["reliability"])
    # the study's board and its fidelity line carry it too
    assert api.client.get(f"/api/leaderboards/vit-tiny?study_id={sid}").json()["reliability"]
    assert board["fidelity"]["reliability"]["seeds"] == 4
    report = api.client.get("/api/fidelity?proxy=vit-tiny").json()
    _check(report["reliability"])
    page = api.client.get("/?proxy=vit-tiny").text
    assert 'id="reliability-line"' in page and "rank reliability" in page
    fid_page = api.client.get("/fidelity?proxy=vit-tiny").text
    assert 'id="reliability-line"' in fid_page and "rank reliability" in fid_page
    # a study's cells: in its JSON and on its page
    _check(api.client.get(f"/api/studies/{sid}").json()["reliability"])
    study_page = api.client.get(f"/studies/{sid}").text
    assert 'id="reliability-line"' in study_page


def test_a_board_with_one_seed_says_why_it_has_no_reliability(api: Api) -> None:
    seed_board(api.settings.database_url, [(n, [0.5]) for n in VALUES])
    rel = api.client.get("/api/leaderboards/vit-tiny").json()["reliability"]
    assert rel["reliability"] is None and "2 seeds" in rel["reason"]
    assert "not measurable" in rel["text"]


def test_cli_leaderboard_and_fidelity_print_reliability(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rel.db'}"
    seed_board(url, VALUES.items())
    runner = CliRunner()
    res = runner.invoke(main, ["leaderboard", "--proxy", "vit-tiny", "--db", url, "--json"])
    assert res.exit_code == 0, res.output
    _check(json.loads(res.output.strip().splitlines()[-1])["reliability"])
    res = runner.invoke(main, ["leaderboard", "--proxy", "vit-tiny", "--db", url, "--wide"])
    assert res.exit_code == 0 and "rank reliability" in res.output
    res = runner.invoke(main, ["fidelity", "--proxy", "vit-tiny", "--db", url, "--json"])
    assert res.exit_code == 0, res.output
    _check(json.loads(res.output.strip().splitlines()[-1])["reliability"])
    res = runner.invoke(main, ["fidelity", "--proxy", "vit-tiny", "--db", url, "--boot", "50"])
    assert res.exit_code == 0 and "rank reliability" in res.output
