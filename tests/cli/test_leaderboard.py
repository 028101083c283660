"""``normfree leaderboard``: the CLI files arms in groups as the API does."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from normfree.cli import main
from normfree.specs import NormSpec
from tests.boards import seed_board


def _board_db(path: Path) -> str:
    """erf (a catalog function: no candidate row), a stored user function and LayerNorm."""
    url = f"sqlite:///{path}"
    arms = {"erf": [0.9, 0.92], "mine": [0.5, 0.52], "layernorm": [0.8, 0.81]}
    mine = {"name": "mine", "group": "user", "properties": {"odd": True}}
    seed_board(url, arms.items(), candidates=[mine])
    return url


def _rows(*args: str) -> list[dict]:
    res = CliRunner().invoke(main, ["leaderboard", *args, "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.output.strip().splitlines()[-1])["rows"]


def test_group_keeps_catalog_functions(tmp_path: Path) -> None:
    db = _board_db(tmp_path / "board.db")
    everything = _rows("--proxy", "vit-tiny", "--db", db)
    assert [r["candidate"] for r in everything] == ["erf", "layernorm", "mine"]
    natural = _rows("--proxy", "vit-tiny", "--group", "natural", "--db", db)
    assert [(r["candidate"], r["group"], r["rank"]) for r in natural] == [("erf", "natural", 1)]
    assert natural[0]["properties"]["odd"] is True  # filled from the catalog, as the API does
    user = _rows("--proxy", "vit-tiny", "--group", "user", "--db", db)
    assert [r["candidate"] for r in user] == ["mine"]
    baseline = _rows("--proxy", "vit-tiny", "--group", "baseline", "--db", db)
    assert [r["candidate"] for r in baseline] == ["layernorm"]


def _arms_db(path: Path) -> str:
    """erf (two seeds), shift_h(erf, 0) (a third seed: the same function), erf with alpha0=1
    (an option arm), layernorm."""
    url = f"sqlite:///{path}"
    arms = [
        (NormSpec(name="erf"), [0.9, 0.91]),
        (NormSpec(name="shift_h(erf, 0)"), [0.7, 0.72, 0.93]),
        (NormSpec(name="erf", alpha0=1.0), [0.6, 0.62]),
        (NormSpec(name="layernorm"), [0.8, 0.81]),
    ]
    seed_board(url, arms)
    return url


def test_one_function_is_one_row_and_option_arms_are_labelled(tmp_path: Path) -> None:
    db = _arms_db(tmp_path / "arms.db")
    for extra in ((), ("--study", "1")):  # from the summaries and from the trials alike
        rows = _rows("--proxy", "vit-tiny", "--db", db, *extra)
        by_name = {(r["candidate"], r["norm"].get("alpha0")): r for r in rows}
        assert len(rows) == 3, [r["candidate"] for r in rows]
        erf = by_name[("erf", 0.5)]
        # erf's own seeds 0 and 1, and seed 2 from shift_h(erf, 0): one function, one row
        assert erf["seeds"] == [0, 1, 2] and erf["n_trials"] == 5
        assert ("erf", 1.0) in by_name and ("layernorm", 0.5) in by_name
    res = CliRunner().invoke(main, ["leaderboard", "--proxy", "vit-tiny", "--db", db, "--wide"])
    assert res.exit_code == 0, res.output
    assert "erf [alpha0=1.0]" in res.output
    assert "shift_h" not in res.output


def test_a_long_arm_is_never_cut_and_wide_prints_it_on_one_line(tmp_path: Path) -> None:
    db = _arms_db(tmp_path / "arms.db")
    narrow = CliRunner().invoke(
        main, ["leaderboard", "--proxy", "vit-tiny", "--db", db], env={"COLUMNS": "70"}
    )
    assert narrow.exit_code == 0, narrow.output
    table = [line for line in narrow.output.splitlines() if line[:1] in "┏┃┡│└"]
    assert max(len(line) for line in table) <= 70  # the terminal's width
    assert "(paired)" in narrow.output and "alpha0" in narrow.output  # wrapped, never cut
    wide = CliRunner().invoke(
        main, ["leaderboard", "--proxy", "vit-tiny", "--db", db, "--wide"], env={"COLUMNS": "70"}
    )
    assert "erf [alpha0=1.0]" in wide.output and "(paired)" in wide.output


def test_an_unknown_proxy_or_metric_exits_non_zero_with_the_choices(tmp_path: Path) -> None:
    db = _arms_db(tmp_path / "arms.db")
    r = CliRunner().invoke(main, ["leaderboard", "--proxy", "vit-tinny", "--db", db])
    assert r.exit_code == 2 and "did you mean 'vit-tiny'" in r.output, r.output
    r = CliRunner().invoke(
        main, ["leaderboard", "--proxy", "vit-tiny", "--metric", "val_acc2", "--db", db, "--json"]
    )
    assert r.exit_code == 2
    error = json.loads(r.output)["error"]
    assert "did you mean 'val_acc'" in error and "choose from val_acc" in error
