"""Property tables (Derf Tables 2-5) judged on synthetic screen trials."""

from __future__ import annotations

from normfree.fidelity.properties import evaluate_table, table_cells
from normfree.fidelity.published import PROPERTY_TABLES
from normfree.fidelity.reference import Cell, cell_key
from normfree.fidelity.report import ProxyTrial


def screen(values: dict[str, float | None], noise: float = 0.002) -> list[ProxyTrial]:
    """Three seeds per cell: the value +- noise, or failed (None)."""
    out = []
    for fn, v in values.items():
        for seed, d in enumerate((-noise, 0.0, noise)):
            out.append(
                ProxyTrial(cell=cell_key(Cell(function=fn)), label=fn, seed=seed,
                           failed=v is None, objective=None if v is None else v + d)
            )  # fmt: skip
    return out


def published_like(table: str) -> dict[str, float | None]:
    """A screen whose accuracies move as the published ones (0.1 point -> 0.01)."""
    return {
        f: None if v is None else 0.9 + (v - 82.0) / 10
        for row in PROPERTY_TABLES[table][1].values()
        for f, v in row
    }


def test_a_faithful_screen_passes_every_table() -> None:
    for table in PROPERTY_TABLES:
        got = evaluate_table(table, screen(published_like(table)))
        assert got["passed"], (table, got["misses"], got["spearman_drops"])
        assert got["measured"] == got["planned"] == len(table_cells(table))


def test_misses_are_named() -> None:
    values = published_like("flat_centre")
    values["flat_centre(erf, 3)"] = values["erf"]  # trains as erf does; fails at scale
    values["flat_centre(tanh, 0.5)"] = None  # fails, where it trains at scale
    got = evaluate_table("flat_centre", screen(values))
    assert not got["passed"]
    assert set(got["misses"]) == {"flat_centre(erf, 3)", "flat_centre(tanh, 0.5)"}
    assert got["failed_cells_fail"] == "2/3" and got["trained_cells_train"] == "14/15"


def test_a_large_drop_counts_as_a_failure() -> None:
    values = published_like("growth")
    values["power23"] = 0.5  # completes, but far below the table's best: failed in effect
    values["linear"] = None
    got = evaluate_table("growth", screen(values))
    power = next(c for c in got["cells"] if c["function"] == "power23")
    assert power["verdict"] == "dropped" and power["agrees"]
    assert got["failed_cells_fail"] == "2/2"


def test_unmeasured_cells_are_listed_not_judged() -> None:
    got = evaluate_table("linear_part", screen({"erf": 0.92, "linear_part(erf, 0.5)": None}))
    assert got["measured"] == 2 and got["planned"] == 16
    assert got["spearman_drops"] is None and not got["passed"]
