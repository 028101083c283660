"""Issue 16 through the CLI: formulas that used to end in a traceback or need ``--``, and study
creation that states its cost and refuses what it cannot afford."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from normfree.cli import main


def _run(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return res.exit_code, res.output


def test_non_finite_transform_parameter_is_a_clean_error() -> None:
    code, out = _run("candidates", "show", "shift_h(erf, 1e400)", "--json")
    assert code == 2 and "not a finite number" in json.loads(out)["error"]
    code, out = _run("candidates", "show", "shift_h(erf, 1e400)")
    assert code == 2 and "Traceback" not in out


def test_tiny_transform_constants_are_refused_like_formula_constants() -> None:
    code, out = _run("candidates", "show", "clip(erf, 1e-300)", "--json")
    assert code == 2 and ">= 1e-12" in json.loads(out)["error"]


def test_a_formula_may_start_with_a_minus() -> None:
    code, out = _run("candidates", "check", "-erf(u)", "--json")
    assert code == 0, out
    assert json.loads(out)["canonical"] == "-erf(u)"


def test_power_tower_and_far_singularity_are_refused() -> None:
    code, out = _run("candidates", "check", "((((((tanh(u)**32)**32)**32)**32)**32)**32)", "--json")
    assert code == 2 and "too large once powers are expanded" in json.loads(out)["error"]
    code, out = _run("candidates", "check", "1/(exp(u-150)-1)", "--json")
    assert code == 2 and "u=150" in json.loads(out)["error"]


def test_study_creation_prints_its_estimate_and_refuses_bad_params(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    common = ("--functions", "erf", "--proxy", "vit-tiny", "--seeds", "1", "--baselines", "")
    code, out = _run(
        "study", "options", *common, "--option", "dim=64", "--detach", "--db", db, "--json"
    )
    assert code == 0, out
    est = json.loads(out)["estimate"]
    assert est["trials"] == 1 and est["trial_seconds"] > 0
    code, out = _run("study", "options", *common, "--option", "dim=64", "--detach", "--db", db)
    assert code == 0 and "trial-seconds" in out
    code, out = _run(
        "study", "options", *common, "--option", "dim=1000000000", "--detach", "--db", db, "--json"
    )
    assert code == 2 and "dim" in json.loads(out)["error"]
    code, out = _run(
        "study", "options", *common, "--option", "__init__=1", "--detach", "--db", db, "--json"
    )
    assert code == 2 and "__init__" in json.loads(out)["error"]
