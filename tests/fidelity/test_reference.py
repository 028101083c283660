"""Reference sets: rows validated and resolved through the catalog, CSV in and out."""

from __future__ import annotations

import pytest

from normfree.fidelity.published import published
from normfree.fidelity.reference import (
    Cell,
    ReferenceError,
    build_set,
    cell_key,
    from_csv,
    norm_cell_key,
    to_csv,
)

HEADER = "setting,family,metric,direction,resolution,function,shift,alpha,value,failed,note\n"


def test_the_builtin_set_holds_science_md_section_7() -> None:
    ref = published()
    by = {(r.setting, r.cell.label): r for r in ref.rows}
    assert by[("ViT-B ImageNet top-1 %", "erf + s")].value == 82.8  # Derf
    assert by[("ViT-B ImageNet top-1 %", "tanh")].value == 82.5  # DyT
    assert by[("ViT-B ImageNet top-1 %", "identity")].failed
    assert by[("ViT-B ImageNet top-1 %", "tanh (alpha fixed at 1)")].value == 81.1
    assert by[("DiT-XL/2 ImageNet FID", "erf + s")].value == 18.92
    assert by[("DiT-B train loss, eval mode", "layernorm")].value == 0.1531
    shifts = [r for r in ref.rows if r.setting == "ViT-B top-1 change, horizontal shift of erf"]
    assert {r.cell.function: r.failed for r in shifts}["shift_h(erf, 2)"] is True
    ranged = next(r for r in shifts if r.cell.function == "shift_h(erf, 1)")
    assert (ranged.value_low, ranged.value_high) == (-1.1, -0.3)
    # the Derf paper's property ablations (Tables 2-5), operator without s, one setting each
    t5 = {r.cell.function: r for r in ref.rows if "(Derf Table 5)" in r.setting}
    assert t5["flat_centre(tanh, 2)"].value == 81.1 and t5["flat_centre(arctan, 3)"].failed
    assert t5["erf"].value == 82.6 and t5["erf"].cell.shift == "none"
    t4 = {r.cell.function: r for r in ref.rows if "(Derf Table 4)" in r.setting}
    assert t4["power23"].failed and t4["linear"].failed and t4["logquad"].value == 82.1
    t3 = {r.cell.function: r for r in ref.rows if "(Derf Table 3)" in r.setting}
    assert t3["linear_part(isru, 0.5)"].failed and t3["linear_part(erf, 0.01)"].value == 82.4
    t2 = {r.cell.function: r for r in ref.rows if "(Derf Table 2)" in r.setting}
    assert t2["linear"].failed and t2["clip(asinh, 2)"].value == 82.4


def test_cells_are_identified_by_what_they_compute() -> None:
    assert cell_key(Cell(function="shift_h(erf, 0)")) == cell_key(Cell(function="erf"))
    assert cell_key(Cell(function="derf")) == cell_key(Cell(function="erf", shift="scalar"))
    assert cell_key(Cell(function="dyt")) == cell_key(Cell(function="tanh"))
    assert cell_key(Cell(function="erf")) != cell_key(Cell(function="erf", shift="scalar"))
    assert cell_key(Cell(function="tanh", alpha=1)) != cell_key(Cell(function="tanh"))
    # a trial's stored NormSpec maps to the same key, whatever its name's spelling
    assert norm_cell_key({"name": "shift_h(erf, 0)"}) == cell_key(Cell(function="erf"))
    assert norm_cell_key({"name": "derf"}) == cell_key(Cell(function="derf"))
    assert norm_cell_key(
        {"name": "mine", "formula": "2/(1+exp(-2*u))-1", "alpha0": 1.0, "learn_alpha": False}
    ) == cell_key(Cell(function="tanh", alpha=1))
    assert norm_cell_key({"name": "a-stored-user-name-without-formula"}) is None


def test_csv_round_trip() -> None:
    ref = published()
    again = from_csv(to_csv(ref), name=ref.name, source=ref.source, title=ref.title)
    assert again.rows == ref.rows


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("S,vit,accuracy,maximize,0.2,erff,,,82,,", "row 1: cell 'erff': unknown"),
        ("S,vit,accuracy,maximize,0.2,log(u),,,82,,", "row 1: cell 'log(u)'"),
        ("S,vit,accuracy,maximize,0.2,erf,,,failed,false,x", ""),  # 'failed' value is fine
        ("S,vit,accuracy,maximize,0.2,erf,,,82,true,", "carries no value"),
        ("S,vit,accuracy,maximize,0.2,erf,,,nan,,", "finite"),
        ("S,cnn,accuracy,maximize,0.2,erf,,,82,,", "family"),
        ("S,vit,accuracy,upwards,0.2,erf,,,82,,", "direction"),
        ("S,vit,accuracy,maximize,0.2,layernorm,scalar,,82,,", "not baselines"),
        ("S,vit,accuracy,maximize,0.2,erf,,0,82,,", "fixed alpha"),
        ("S,vit,accuracy,maximize,-1,erf,,,82,,", "resolution"),
        ("S,vit,accuracy,maximize,0.2,__import__('os'),,,82,,", "row 1"),
    ],
)
def test_bad_rows_are_refused_with_the_row_and_the_reason(line: str, reason: str) -> None:
    if not reason:
        assert from_csv(HEADER + line, name="ok", source="s").rows[0].failed
        return
    with pytest.raises(ReferenceError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        from_csv(HEADER + line, name="bad", source="s")


def test_setting_consistency_and_duplicate_cells() -> None:
    text = HEADER + (
        "S,vit,accuracy,maximize,0.2,erf,,,82,,\n"
        "S,vit,accuracy,minimize,0.2,tanh,,,81,,\n"  # direction differs within S
        'S,vit,accuracy,maximize,0.2,"shift_h(erf, 0)",,,80,,\n'  # erf, spelled otherwise
    )
    with pytest.raises(ReferenceError) as err:
        from_csv(text, name="bad", source="s")
    msg = str(err.value)
    assert "row 2: direction" in msg and "row 3: cell" in msg and "twice" in msg


def test_header_and_set_level_errors() -> None:
    with pytest.raises(ReferenceError, match="missing columns"):
        from_csv("setting,function\nS,erf\n", name="x", source="s")
    with pytest.raises(ReferenceError, match="name"):
        build_set({"name": "Bad Name!", "source": "s", "rows": []})
    with pytest.raises(ReferenceError, match="rows"):
        build_set({"name": "empty", "source": "s", "rows": []})
