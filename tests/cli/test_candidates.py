"""``normfree candidates ...`` and ``normfree demo`` through click's CliRunner (real catalog)."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from normfree.cli import main
from normfree.search_space import catalog

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def run():
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(main, list(args), catch_exceptions=False)

    return invoke


def test_list_table_has_every_candidate_and_properties(run):
    res = run("candidates", "list")
    assert res.exit_code == 0, res.output
    for name in ("erf", "tanh", "saturlog", "power23", "dampexp"):
        assert name in res.output
    header = next(line for line in res.stdout.splitlines() if line.startswith("name"))
    for col in ("f(0)=0", "odd", "growth", "range", "f'(0)", "flat", "monotone", "smooth"):
        assert col in header
    assert "baselines" in res.output and "layernorm" in res.output


def test_list_json(run):
    res = run("candidates", "list", "--json")
    assert res.exit_code == 0
    data = json.loads(res.output)
    names = [c["name"] for c in data["candidates"]]
    assert names == catalog.names()
    erf = data["candidates"][0]
    assert erf["properties"]["odd"] is True and erf["group"] == "natural"
    assert erf["lineage"] == {"base": "erf", "formula": None, "steps": []}
    assert [b["name"] for b in data["baselines"]] == ["layernorm", "rmsnorm", "identity"]


def test_list_group_filter(run):
    data = json.loads(run("candidates", "list", "--group", "growth", "--json").output)
    assert [c["name"] for c in data["candidates"]] == [
        "linear", "power23", "logsign", "logquad", "asinh"
    ]  # fmt: skip
    res = run("candidates", "list", "--group", "nope")
    assert res.exit_code != 0


def test_show_catalog_transform_and_baseline(run):
    res = run("candidates", "show", "expsign")
    assert res.exit_code == 0 and "Piecewise((1, Eq(u, 0))" in res.output
    data = json.loads(run("candidates", "show", "shift_h(erf, 0.5)", "--json").output)
    assert data["name"] == "shift_h(erf, 0.5)"
    assert data["lineage"]["steps"] == [{"transform": "shift_h", "params": {"lam": 0.5}}]
    assert data["properties"]["zero_centred"] is False
    data = json.loads(run("candidates", "show", "layernorm", "--json").output)
    assert data["kind"] == "baseline"


def test_show_unknown_exits_non_zero(run):
    res = run("candidates", "show", "nope", "--json")
    assert res.exit_code == 2
    assert "unknown" in json.loads(res.output)["error"]


def test_check_finds_duplicate(run):
    res = run("candidates", "check", "2*sigmoid(2*u) - 1")
    assert res.exit_code == 0
    assert "duplicate of tanh" in " ".join(res.output.split())
    data = json.loads(run("candidates", "check", "u/(1+abs(u))", "--json").output)
    assert data["duplicate_of"] == "smoothsign"
    assert data["canonical"] == "u/(Abs(u) + 1)"
    assert data["properties"]["bounded"] is True
    data = json.loads(run("candidates", "check", "tanh(2*u)/2", "--name", "half", "--json").output)
    assert data["duplicate_of"] is None and data["name"] == "half"


@pytest.mark.parametrize(
    ("formula", "reason", "position"),
    [
        ("log(u)", "log(u) is not finite", None),
        ("1/u", "division by zero", None),
        ("__import__('os')", "strings are not allowed", 11),
        ("u.real", "attribute access", 1),
        ("u**100", "exponent too large", 1),
    ],
)
def test_check_rejects_with_reason_and_non_zero_exit(run, formula, reason, position):
    res = run("candidates", "check", formula, "--json")
    assert res.exit_code == 2
    data = json.loads(res.output)
    assert reason in data["error"] and reason in data["reason"]
    assert data["position"] == position
    res = run("candidates", "check", formula)
    assert res.exit_code == 2
    assert "formula rejected" in res.output  # CliRunner mixes stderr into output


def test_demo_json(run):
    res = run("demo", "--catalog-only", "--json")
    assert res.exit_code == 0
    data = json.loads(res.output)
    assert [row["name"] for row in data["candidates"]] == catalog.names()
    for row in data["candidates"]:
        assert row["finite"] is True
        assert row["max_err_f32"] < 1e-5 and row["max_err_df32"] < 1e-4
    assert data["baselines"] == ["layernorm", "rmsnorm", "identity"]
    res = run("demo", "--catalog-only")
    assert res.exit_code == 0 and f"{len(catalog.names())} candidates evaluated" in res.output


def test_quick_commands_exit_early_with_their_output_and_status(tmp_path):
    """``python -m normfree`` ends quick commands with os._exit (cli.run): the whole output
    still arrives, and the exit status is the command's."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "NORMFREE_DATABASE_URL": f"sqlite:///{tmp_path / 'n.db'}"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "normfree", *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)

    ok = cli("candidates", "check", "u/(7+abs(u))", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["properties"]["bounded"] is True
    bad = cli("candidates", "check", "u+", "--json")
    assert bad.returncode == 2 and "error" in json.loads(bad.stdout)
    missing = cli("candidates", "show", "no-such-function")
    assert missing.returncode != 0 and "no-such-function" in missing.stderr + missing.stdout
    listed = cli("candidates", "list", "--json")
    assert listed.returncode == 0 and len(json.loads(listed.stdout)["candidates"]) >= 16
