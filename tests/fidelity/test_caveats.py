"""The caveats a verdict carries: calibration, provisional rankings, near chance, few cells."""

from __future__ import annotations

from normfree.fidelity import caveats
from normfree.fidelity.report import build_report, headline
from normfree.workers.proxies import PROXIES
from tests.fidelity.test_report import _row, _set, _trials


def test_only_the_calibrated_screens_carry_a_calibration() -> None:
    calibrated = {name for name, p in PROXIES.items() if p.calibration}
    assert calibrated == {"vit-screen", "vit-screen-heldout", "vit-screen-loss", "dit-screen"}
    for smoke in ("vit-tiny", "dit-tiny"):
        assert caveats.calibration_of(smoke) is None
        assert "not calibrated" in caveats.uncalibrated_note(smoke)
    assert "5/5" in str(caveats.calibration_of("vit-screen-heldout"))
    assert caveats.calibration_of("no-such-proxy") is None


def test_near_chance_is_a_tenth_of_the_gap_above_chance() -> None:
    # ten classes: chance 0.1, the bar 0.1 + 0.1 * 0.9 = 0.19
    assert caveats.near_chance(0.1) and caveats.near_chance(0.18)
    assert not caveats.near_chance(0.2) and not caveats.near_chance(None)
    # every classifier gets the rule, the smoke presets (min_learning 0) included
    rule = caveats.near_chance_rule("vit-tiny")
    assert rule is not None and rule({"val_acc": 0.11}) and not rule({"val_acc": 0.6})
    assert not rule({}) and not rule(None)
    assert caveats.near_chance_rule("dit-tiny") is None  # a diffusion loss has no chance level


def _board(*rows: tuple[str, int, float | None]) -> list[dict]:
    return [{"label": a, "n": n, "mean": m, "objective": "val_acc"} for a, n, m in rows]


def test_a_board_with_two_seeds_per_arm_is_provisional_and_names_chance_arms() -> None:
    got = caveats.board_caveats(
        "vit-tiny",
        _board(("layernorm", 2, 0.61), ("shift_h(erf, 2)", 2, 0.1), ("never", 0, None)),
    )
    assert got["provisional"] and got["fewest_seeds"] == 2 and got["min_seeds"] == 3
    assert got["near_chance"] == ["shift_h(erf, 2)"]
    assert not got["calibrated"]
    text = " ".join(got["notes"])
    assert "provisional" in text and "not calibrated" in text and "shift_h(erf, 2)" in text


def test_a_calibrated_board_with_three_seeds_has_no_caveat() -> None:
    got = caveats.board_caveats(
        "vit-screen-heldout", _board(("layernorm", 3, 0.93), ("erf", 5, 0.94), ("x", 0, None))
    )
    assert got["calibrated"] and not got["provisional"] and got["notes"] == []
    # an arm with no completed seed does not make the board provisional, nor does a loss
    loss = [{"label": "erf", "n": 3, "mean": 0.05, "objective": "val_loss"}]
    assert caveats.board_caveats("dit-screen", loss)["near_chance"] == []


def _three_cells() -> dict:
    return build_report(
        _set([_row("layernorm", 82.3), _row("tanh", 82.5), _row("derf", 82.8)]),
        _trials({"name": "layernorm"}, "ln", [0.80, 0.81])
        + _trials({"name": "tanh"}, "tanh", [0.82, 0.83])
        + _trials({"name": "derf"}, "derf", [0.84, 0.85]),
        family="vit",
        n_boot=0,
    )


def test_a_rank_correlation_over_three_cells_is_not_a_headline() -> None:
    rep = _three_cells()
    assert rep["summary"]["spearman_mean"] == 1.0  # the figure stays in the report ...
    assert rep["summary"]["spearman_headline"] is None  # ... but is not a headline
    line = headline(rep)
    assert "Spearman" not in line and "too few cells" in line
    # LayerNorm and DyT are within the resolution: two resolvable orders, too few to quote
    assert rep["summary"]["pairs_resolvable"] == 2 and "orders reproduced" not in line
    assert "failures agree on 100% of 3 cells" in line


def test_an_uncalibrated_preset_prints_no_fidelity_figure() -> None:
    rep = {**_three_cells(), "calibrated": False, "subject": {"proxy": "vit-tiny"}}
    line = headline(rep)
    assert line.startswith("no fidelity headline") and "vit-tiny" in line
    assert "orders reproduced" not in line and "Spearman" not in line


def test_a_heavy_tailed_arm_is_named_by_its_properties_or_its_catalog_entry() -> None:
    rows = [
        {"candidate": "exproot", "label": "exproot + s", "n": 3, "mean": 0.76},
        {"candidate": "erf", "label": "erf + s", "n": 3, "mean": 0.92},
        {"candidate": "mine", "n": 3, "mean": 0.9, "properties": {"heavy_tailed_slope": True}},
        {"candidate": "power23clip", "n": 3, "mean": 0.91},  # |u|^-1/3: square integrable
        {"candidate": "unranked", "n": 0, "mean": None, "properties": {"heavy_tailed_slope": True}},
    ]
    got = caveats.board_caveats("vit-screen-heldout", rows)
    assert got["heavy_tailed"] == ["exproot + s", "mine"]
    assert sum("gradient noise" in n for n in got["notes"]) == 1
    assert "exproot + s, mine have a slope" in got["notes"][-1]
    assert caveats.board_caveats("vit-screen-heldout", rows[1:2])["notes"] == []
