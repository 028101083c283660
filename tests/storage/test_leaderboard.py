"""The leaderboard part of the repository contract, on SQLite and PostgreSQL (``repo``):
ranks, paired comparisons, filters and seed de-duplication computed by hand."""

from __future__ import annotations

import pytest

from normfree.specs import TrialConfig, TrialResult
from normfree.storage import Repository
from tests.storage.support import PROXY, cfg, complete, run_all, study

# Final val_acc per seed. tanh's seed 3 diverges; identity is clearly worse than the rest.
VALUES = {
    "erf": [0.90, 0.92, 0.94],
    "tanh": [0.91, 0.70, 0.93, None],
    "layernorm": [0.88, 0.90, 0.90],
    "identity": [0.50, 0.52, 0.51],
}


def _outcome(config: TrialConfig) -> TrialResult:
    value = VALUES[config.norm.name][config.seed]
    if value is None:
        return TrialResult(status="diverged", objective="val_acc", diverged_at_step=5)
    return complete(value)


@pytest.fixture
def board_study(repo: Repository) -> int:
    for name in ("erf", "tanh"):
        repo.upsert_candidate(
            {"name": name, "group": "sigmoid", "properties": {"odd": True, "bounded": True}}
        )
    sid = study(repo)
    repo.add_trials(
        sid,
        [(cfg(n, s), {"f": n}, None) for n, vs in VALUES.items() for s in range(len(vs))],
    )
    run_all(repo, sid, _outcome)
    return sid


def test_leaderboard_hand_computed(repo: Repository, board_study: int) -> None:
    rows = repo.leaderboard(PROXY)
    assert [r["candidate"] for r in rows] == ["erf", "layernorm", "tanh", "identity"]
    assert [r["rank"] for r in rows] == [1, 2, 3, 4]
    best = repo.study_progress(board_study)["best"]
    assert (best["candidate"], best["seed"], best["value"]) == ("erf", 2, 0.94)
    erf, ln, tanh, ident = rows
    # erf: mean 0.92, std 0.02, half width t(0.975,2)=4.302653 * 0.02 / sqrt(3) = 0.049683
    assert (erf["n"], erf["n_trials"], erf["n_diverged"]) == (3, 3, 0)
    assert erf["mean"] == pytest.approx(0.92, abs=1e-9)
    assert erf["std"] == pytest.approx(0.02, abs=1e-9)
    assert erf["ci_half_width"] == pytest.approx(0.049683, abs=1e-6)
    assert erf["bound"] == pytest.approx(0.92 - 0.049683, abs=1e-6)
    assert erf["ci_high"] == pytest.approx(0.92 + 0.049683, abs=1e-6)
    assert erf["seeds"] == [0, 1, 2]
    assert erf["direction"] == "maximize"
    assert erf["objective"] == "val_acc"
    assert erf["group"] == "sigmoid"
    assert erf["axis_values"] == {"f": "erf"}
    # layernorm: mean 0.893333, std 0.011547, half width 0.028684 -> bound 0.864649
    assert ln["mean"] == pytest.approx(0.893333, abs=1e-6)
    assert ln["bound"] == pytest.approx(0.864649, abs=1e-6)
    assert ln["group"] == "baseline"
    assert ln["vs_layernorm"] is None
    # tanh: seeds 0-2 complete (0.91, 0.70, 0.93), seed 3 diverged
    # mean 0.846667; deviations .063333 -.146667 .083333 -> var 0.032467/2 -> std 0.127410;
    # half width 4.302653 * 0.127410 / sqrt(3) = 0.316504
    assert (tanh["n"], tanh["n_trials"], tanh["n_diverged"]) == (3, 4, 1)
    assert tanh["mean"] == pytest.approx(0.846667, abs=1e-6)
    assert tanh["std"] == pytest.approx(0.127410, abs=1e-6)
    assert tanh["ci_half_width"] == pytest.approx(0.316504, abs=1e-6)
    # paired with layernorm on seeds 0-2: erf diffs .02 .02 .04 -> mean .026667, hw .028684
    assert erf["vs_layernorm"]["n_pairs"] == 3
    assert erf["vs_layernorm"]["mean_diff"] == pytest.approx(0.026667, abs=1e-6)
    assert erf["vs_layernorm"]["ci_half_width"] == pytest.approx(0.028684, abs=1e-6)
    # tanh diffs .03 -.20 .03 -> mean -.046667, std .132791, hw 4.302653*.132791/sqrt(3)=.329871
    assert tanh["vs_layernorm"]["mean_diff"] == pytest.approx(-0.046667, abs=1e-6)
    assert tanh["vs_layernorm"]["ci_half_width"] == pytest.approx(0.329871, abs=1e-6)
    assert tanh["vs_layernorm"]["seeds"] == [0, 1, 2]
    # Welch vs erf: layernorm p = 0.134 and tanh p = 0.43 (tied); identity p < 0.001 (not)
    assert erf["indistinguishable_from_best"] and erf["p_vs_best"] == 1.0
    assert ln["indistinguishable_from_best"]
    assert ln["p_vs_best"] == pytest.approx(0.1336, abs=1e-3)
    assert tanh["indistinguishable_from_best"]
    assert not ident["indistinguishable_from_best"]
    assert ident["p_vs_best"] < 0.001


def test_leaderboard_filters(repo: Repository, board_study: int) -> None:
    assert [r["candidate"] for r in repo.leaderboard(PROXY, group="sigmoid")] == ["erf", "tanh"]
    assert [r["candidate"] for r in repo.leaderboard(PROXY, group="baseline")] == [
        "layernorm",
        "identity",
    ]
    assert [r["candidate"] for r in repo.leaderboard(PROXY, properties={"bounded": True})] == [
        "erf",
        "tanh",
    ]
    assert repo.leaderboard(PROXY, properties={"bounded": False}) == []
    assert repo.leaderboard("other-proxy") == []
    assert repo.list_proxies() == [PROXY]
    assert len(repo.leaderboard(PROXY, study_id=board_study)) == 4
    assert repo.leaderboard(PROXY, study_id=board_study + 1) == []


def test_leaderboard_dedupes_seeds_across_studies(repo: Repository, board_study: int) -> None:
    # The same erf seed 0 trained again in another study: one value per seed, the latest.
    sid = study(repo)
    repo.add_trials(sid, [cfg("erf", 0)])
    run_all(repo, sid, lambda c: complete(0.96))
    erf = next(r for r in repo.leaderboard(PROXY) if r["candidate"] == "erf")
    assert erf["n"] == 3
    assert erf["n_trials"] == 4
    assert erf["mean"] == pytest.approx((0.96 + 0.92 + 0.94) / 3)
    assert erf["study_ids"] == [board_study, sid]


def test_leaderboard_minimize_and_metric(repo: Repository) -> None:
    # A minimised objective ranks by the upper bound; ``metric`` reads another final metric.
    losses = {"erf": [1.0, 1.1, 1.2], "tanh": [0.5, 0.6, 0.7]}
    sid = study(repo)
    repo.add_trials(sid, [cfg(n, s, overrides={"depth": 2}) for n in losses for s in range(3)])

    def outcome(c: TrialConfig) -> TrialResult:
        v = losses[c.norm.name][c.seed]
        return TrialResult(
            status="complete",
            metrics={"val_fd": v, "other": -v},
            objective="val_fd",
            direction="minimize",
        )

    run_all(repo, sid, outcome)
    rows = repo.leaderboard(PROXY)
    assert [r["candidate"] for r in rows] == ["tanh", "erf"]
    assert rows[0]["direction"] == "minimize"
    # upper bound 0.6 + 4.302653 * 0.1 / sqrt(3) = 0.848414
    assert rows[0]["bound"] == pytest.approx(0.848414, abs=1e-6)
    assert rows[0]["overrides"] == {"depth": 2}
    best = repo.study_progress(sid)["best"]
    assert (best["candidate"], best["value"], best["direction"]) == ("tanh", 0.5, "minimize")
    flipped = repo.leaderboard(PROXY, metric="other", direction="maximize")
    assert [r["candidate"] for r in flipped] == ["tanh", "erf"]
    assert flipped[0]["mean"] == pytest.approx(-0.6)


def test_arm_text_tells_option_arms_apart() -> None:
    """One spelling of an arm for the API and the CLI; options away from defaults show."""
    from normfree.storage.leaderboard import arm_text, row_options

    row = {"candidate": "erf", "norm": {"name": "erf", "shift": "scalar", "alpha0": 1.0}}
    assert arm_text("erf", options=row_options(row)) == "erf + s [alpha0=1.0]"
    plain = {"candidate": "erf", "norm": {"name": "erf", "alpha0": 0.5}, "overrides": {}}
    assert arm_text("erf", options=row_options(plain)) == "erf"
    assert arm_text("erf", -0.5) == "erf @ -0.5"
    assert arm_text("ln", options={"depth": 8}) == "ln [depth=8]"


def test_a_transform_of_a_user_function_is_filed_by_its_definition() -> None:
    """``shift_h(mine, 0.5)`` names a stored candidate the catalog does not know: its row is
    described by the definition it trained with (``norm.formula``), so it has a group and
    properties like any transform of a catalog function (it had neither before)."""
    from normfree.search_space import catalog
    from normfree.storage.leaderboard import row_group

    row = {
        "candidate": "shift_h(mine, 0.5)",
        "norm": {"name": "shift_h(mine, 0.5)", "formula": "shift_h(u/(1+abs(u)/2), 0.5)"},
    }
    group, props = row_group(row, catalog.describe)
    assert group == "user"
    assert props["bounded"] is True and props["limit_pos"] == 2.0
    assert not props["zero_centred"]  # shifted by 0.5: f(0) != 0
    bare = {"candidate": "shift_h(mine, 0.5)", "norm": {"name": "shift_h(mine, 0.5)"}}
    assert row_group(bare, catalog.describe) == (None, {})


def test_arms_that_differ_by_a_studys_training_settings_read_apart(repo: Repository) -> None:
    """Two erf arms, one trained at the preset's lr and one at lr=10 (it diverged): on the
    journey they read alike on every board and candidate page ("halfsign [alpha0=1.0]" twice),
    so a user could not tell which one failed. The settings a study sets (lr, epochs, ...)
    belong to the arm's label as its overrides do, from the summaries and from the trials."""
    from normfree.specs import arm_settings
    from normfree.storage.leaderboard import arm_text, row_options

    sid = study(repo)
    repo.add_trials(sid, [cfg("erf", 0), cfg("erf", 0, lr=10.0, overrides={"depth": 2})])
    run_all(repo, sid, lambda c: complete(0.9) if c.lr is None else TrialResult(
        status="diverged", objective="val_acc", diverged_at_step=2))  # fmt: skip
    for rows in (repo.leaderboard(PROXY), repo.leaderboard(PROXY, study_id=sid)):
        labels = sorted(arm_text(r["candidate"], options=row_options(r)) for r in rows)
        assert labels == ["erf", "erf [depth=2, lr=10.0]"]
    assert arm_settings(
        {"overrides": {"depth": 2}, "epochs": 3, "lr": None, "weight_decay": 0}
    ) == {
        "depth": 2,
        "weight_decay": 0,
    }
    assert arm_settings({"overrides": ["not", "a", "mapping"]}) == ["not", "a", "mapping"]
