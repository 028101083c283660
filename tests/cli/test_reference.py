"""``normfree reference`` and ``normfree fidelity`` through click, on a real SQLite database."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli import run as _run
from tests.cli import run_json as _json


def test_import_list_show_delete(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'r.db'}"
    good = tmp_path / "mine.csv"
    good.write_text(
        "setting,family,metric,direction,resolution,function,shift,alpha,value,failed,note\n"
        "s,vit,accuracy,maximize,0.2,layernorm,,,82.3,,\n"
        "s,vit,accuracy,maximize,0.2,tanh,,1,81.1,,DyT Table 9\n"
    )
    code, out = _run("reference", "import", str(good), "--db", db)
    assert code == 2 and "--name and --source" in out
    out = _json("reference", "import", str(good), "--name", "mine", "--source", "me", "--db", db)
    assert out["n_rows"] == 2
    code, out = _run("reference", "import", str(good), "--name", "mine", "--source", "me",
                     "--db", db)  # fmt: skip
    assert code == 1 and "--replace" in out
    names = [r["name"] for r in _json("reference", "list", "--db", db)]
    assert names == ["published", "mine"]
    code, out = _run("reference", "show", "mine", "--db", db)
    assert code == 0 and "tanh (alpha fixed at 1)" in out and "81.1" in out
    code, out = _run("reference", "show", "published", "--csv", "--db", db)
    assert code == 0 and out.startswith("setting,family,metric")
    assert _json("reference", "delete", "mine", "--db", db) == {"deleted": "mine"}
    code, out = _run("reference", "delete", "published", "--db", db)
    assert code == 2 and "built in" in out


def test_bad_files_are_refused_with_reasons(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'r.db'}"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "bad", "source": "s", "rows": [
        {"setting": "s", "family": "vit", "metric": "accuracy", "direction": "maximize",
         "cell": {"function": "erf(u"}, "value_low": 1, "value_high": 1}]}))  # fmt: skip
    code, out = _run("reference", "import", str(bad), "--db", db, "--json")
    assert code == 2 and "erf(u" in json.loads(out)["error"]
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    code, out = _run("reference", "import", str(broken), "--db", db)
    assert code == 2 and "not JSON" in out
    assert [r["name"] for r in _json("reference", "list", "--db", db)] == ["published"]


def test_fidelity_of_a_study(tmp_path: Path) -> None:
    from normfree.settings import Settings
    from normfree.testing.seeding import seed_property_study

    db = f"sqlite:///{tmp_path / 'f.db'}"
    seeded = seed_property_study(Settings(database_url=db))
    rep = _json("fidelity", "--study", str(seeded.study_id), "--boot", "50", "--db", db)
    assert rep["subject"]["study_id"] == seeded.study_id and rep["family"] == "vit"
    # vit-tiny is not calibrated: the report has its figures, the headline says it is no verdict
    assert rep["summary"]["pairs_resolvable"] >= 4 and not rep["calibrated"]
    assert rep["headline"].startswith("no fidelity headline")
    code, out = _run("fidelity", "--study", str(seeded.study_id), "--boot", "0", "--db", db)
    assert code == 0 and "horizontal shift of erf" in out and "shift_h(erf, 1)" in out
    code, out = _run("fidelity", "--db", db)
    assert code == 2 and "--proxy or --study" in out
    code, out = _run("fidelity", "--proxy", "nope", "--db", db, "--json")
    assert code == 2 and "unknown proxy" in json.loads(out)["error"]
    # the seeded study ran 1 epoch: not the preset's setting, so the proxy has no cells yet
    rep = _json("fidelity", "--proxy", "vit-tiny", "--db", db)
    assert rep["summary"]["cells"] == 0


def test_show_csv_neutralises_formula_cells(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'r.db'}"
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({"name": "mine", "source": "s", "rows": [
        {"setting": "=cmd|' /C calc'!A0", "family": "vit", "metric": "accuracy",
         "direction": "maximize", "cell": {"function": "tanh"}, "value_low": -1, "value_high": -1,
         "note": "@SUM(A1)"}]}))  # fmt: skip
    assert _json("reference", "import", str(mine), "--db", db)["n_rows"] == 1
    code, out = _run("reference", "show", "mine", "--csv", "--db", db)
    row = out.splitlines()[1]
    assert code == 0 and row.startswith("'=cmd") and ",'@SUM(A1)" in row and ",-1," in row
