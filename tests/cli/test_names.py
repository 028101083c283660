"""The CLI accepts the same function names as REST (issue 24, point 1): stored candidates by
name, transforms of formulas, lists split outside parentheses; a typo exits non-zero with the
nearest name and writes nothing; ``train --norm`` takes a stored name."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from normfree.cli import main
from tests.cli import run as _run
from tests.cli import run_json as _json

SOFTSIGN15 = "1.5*u/(1+abs(u))"


def _db_with_softsign15(tmp_path: Path) -> tuple[str, object]:
    from normfree import storage
    from normfree.search_space import parse
    from normfree.settings import Settings

    db = f"sqlite:///{tmp_path / 'cli.db'}"
    store = storage.open(Settings(database_url=db))
    store.repo.upsert_candidate(parse(SOFTSIGN15, name="softsign15"))
    return db, store


def test_a_stored_name_in_a_property_study_is_baked_into_its_trials(tmp_path: Path) -> None:
    db, store = _db_with_softsign15(tmp_path)
    created = _json(
        "study", "property", "--transform", "shift_h", "--functions", "softsign15,erf",
        "--values", "0.5", "--proxy", "vit-tiny", "--seeds", "1", "--baselines", "",
        "--detach", "--db", db,
    )  # fmt: skip
    rows = {r["candidate"]: r for r in store.repo.list_trials(created["study_id"])}
    assert set(rows) == {"shift_h(softsign15, 0.5)", "shift_h(erf, 0.5)"}
    norm = rows["shift_h(softsign15, 0.5)"]["config"]["norm"]
    assert norm["formula"] == f"shift_h({SOFTSIGN15}, 0.5)"


def test_function_lists_split_outside_parentheses(tmp_path: Path) -> None:
    db, store = _db_with_softsign15(tmp_path)
    created = _json(
        "study", "options", "--functions", "erf,linear_part(erf,0.1),flat_centre(u/(1+abs(u)),1)",
        "--option", "alpha0=1", "--proxy", "vit-tiny", "--seeds", "1", "--baselines", "",
        "--detach", "--db", db,
    )  # fmt: skip
    names = {r["candidate"] for r in store.repo.list_trials(created["study_id"])}
    assert names == {"erf", "linear_part(erf, 0.1)", "flat_centre(u/(1+abs(u)), 1)"}


def test_a_typo_exits_non_zero_with_the_nearest_name_and_creates_nothing(tmp_path: Path) -> None:
    db, store = _db_with_softsign15(tmp_path)
    for typo, near in (("erff", "'erf'"), ("softsing15", "'softsign15'")):
        code, out = _run(
            "study", "property", "--transform", "shift_h", "--functions", typo,
            "--values", "0.5", "--proxy", "vit-tiny", "--detach", "--db", db,
        )  # fmt: skip
        assert code != 0 and f"did you mean {near}" in out, out
        assert "Traceback" not in out
    code, out = _run(
        "study", "options", "--functions", "erf", "--option", "alpah0=1",
        "--proxy", "vit-tiny", "--detach", "--db", db, "--json",
    )  # fmt: skip
    assert code != 0 and "did you mean 'alpha0'" in json.loads(out)["error"]
    assert store.repo.list_studies() == []


def test_train_takes_a_stored_name_and_refuses_an_unknown_one_in_one_line(
    tmp_path: Path,
) -> None:
    db, _ = _db_with_softsign15(tmp_path)
    r = CliRunner().invoke(
        main,
        ["train", "--proxy", "vit-tiny", "--norm", "shift_h(softsign15, 0.5)", "--epochs", "1",
         "--db", db, "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] in ("complete", "diverged")
    assert out["config"]["norm"]["name"] == "shift_h(softsign15, 0.5)"
    assert out["config"]["norm"]["formula"] == f"shift_h({SOFTSIGN15}, 0.5)"
    r = CliRunner().invoke(main, ["train", "--proxy", "vit-tiny", "--norm", "tahn", "--db", db])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "did you mean 'tanh'" in lines[0], r.output


def test_candidates_show_finds_a_stored_name_and_creates_no_database(tmp_path: Path) -> None:
    """A candidate submitted over REST is shown by name (and inside a transform), as a study
    and ``train --norm`` resolve it; a name no database holds exits 2 with the nearest names,
    and asking a SQLite file that does not exist does not create it."""
    db, _ = _db_with_softsign15(tmp_path)
    shown = _json("candidates", "show", "softsign15", "--db", db)
    assert shown["name"] == "softsign15" and shown["formula"] == SOFTSIGN15
    assert shown["properties"]["range_max"] == 1.5
    nested = _json("candidates", "show", "shift_h(softsign15, 0.5)", "--db", db)
    assert nested["properties"]["zero_centred"] is False
    code, out = _run("candidates", "show", "softsing15", "--db", db, "--json")
    assert code == 2 and "softsign15" in json.loads(out)["error"]
    missing = tmp_path / "none.db"
    code, out = _run("candidates", "show", "softsign15", "--db", f"sqlite:///{missing}")
    assert code == 2 and "unknown candidate" in out and not missing.exists()


def test_candidates_list_shows_the_stored_candidates_after_the_catalog(tmp_path: Path) -> None:
    """A user's submitted functions are listed beside the catalog (``--db`` or ``--stored``;
    archived ones only with ``--archived``), and a database that does not exist lists none."""
    db, store = _db_with_softsign15(tmp_path)
    listed = _json("candidates", "list", "--db", db)
    assert [s["name"] for s in listed["stored"]] == ["softsign15"]
    assert listed["stored"][0]["formula"] == SOFTSIGN15 and listed["candidates"]
    code, out = _run("candidates", "list", "--db", db)
    assert code == 0 and "stored in the database" in out and "softsign15" in out
    store.repo.archive_candidate("softsign15")
    assert _json("candidates", "list", "--db", db)["stored"] == []
    assert [
        s["archived"] for s in _json("candidates", "list", "--db", db, "--archived")["stored"]
    ] == [True]
    missing = tmp_path / "none.db"
    listed = _json("candidates", "list", "--db", f"sqlite:///{missing}")
    assert listed["stored"] == [] and "no database file" in listed["stored_not_read"]
    assert not missing.exists()
    assert "stored_not_read" not in _json("candidates", "list", "--db", db)
