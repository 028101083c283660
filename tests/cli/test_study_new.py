"""``normfree study kinds`` and ``normfree study new KIND``: the CLI reads the kind registry, so
a kind needs no command of its own; bad input is a clear error, not a traceback."""

from __future__ import annotations

import json
from pathlib import Path

from normfree.workers import kinds
from tests.cli import run, run_json


def test_kinds_lists_the_registry() -> None:
    listed = run_json("study", "kinds", "--json")
    assert [r["kind"] for r in listed] == list(kinds.KINDS)
    assert all(r["summary"] == kinds.get(r["kind"]).summary for r in listed)


def test_new_creates_a_study_of_any_kind(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    spec = json.dumps({"transform": "shift_h", "values": [-0.5, 0.5]})
    made = run_json(
        "study", "new", "property", "--functions", "erf", "--spec", spec, "--proxy", "vit-tiny",
        "--seeds", "1", "--epochs", "1", "--param", "seed0=3", "--detach", "--db", db, "--json",
    )  # fmt: skip
    assert made["kind"] == "property" and made["trials"] == 3  # 2 values + LayerNorm, 1 seed
    trials = run_json("study", "status", str(made["study_id"]), "--db", db, "--json")
    assert trials["total"] == 3


def test_new_refuses_bad_input_clearly(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    common = ("--proxy", "vit-tiny", "--detach", "--db", db, "--json")
    code, out = run("study", "new", "nope", *common)
    assert code != 0 and "unknown study kind 'nope'" in out
    code, out = run("study", "new", "options", "--spec", "[1]", *common)
    assert code != 0 and "--spec must be a JSON object" in out
    code, out = run("study", "new", "options", "--param", "oops", *common)
    assert code != 0 and "KEY=VALUE" in out
    code, out = run("study", "new", "options", "--functions", "erf", *common)
    assert code != 0 and "options:" in out  # the kind's own rule: an options study names options
    code, out = run("study", "new", "search", "--spec", '{"seeds": "many"}', *common)
    assert code != 0 and "seeds" in out and "Traceback" not in out
