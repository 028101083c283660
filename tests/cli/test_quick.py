"""The quick commands import what they use: no torch, no pydantic (and, from the catalog index,
a stored check result or the checker process, no sympy).

Each command runs in a fresh interpreter (a subprocess), which then reports the heavy modules it
loaded; the test asserts on those, not on seconds (``bench/bench_cli.py`` measures the time).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "sympy", "numpy", "scipy", "optuna", "ray", "sqlalchemy", "fastapi")
# Not heavy, but ~0.2 s and ~0.03 s of a 0.5 s budget: loaded only to analyse.
LIGHT = ("pydantic", "importlib.metadata")

_PROBE = """
import json, sys
args, heavy_names = json.loads(sys.argv[1]), json.loads(sys.argv[2])
sys.argv = ["normfree", *args]
from normfree.cli import main
try:
    main()
except SystemExit as exc:
    code = exc.code or 0
else:
    code = 0
heavy = sorted(m for m in heavy_names if m in sys.modules)
print("\\nLOADED " + json.dumps({"code": code, "heavy": heavy}))
"""


def _loaded(*args: str, cache: Path, heavy: tuple[str, ...] = HEAVY, **extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NORMFREE_KERNEL_CACHE": str(cache / "kernels")}
    env.update(extra)
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(list(args)), json.dumps(heavy)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
        check=True,
    ).stdout
    return json.loads(out.rsplit("LOADED ", 1)[1])


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory whose catalog index is built once (by the first command)."""
    path = tmp_path_factory.mktemp("cache")
    assert _loaded("candidates", "list", "--json", cache=path)["code"] == 0
    return path


def test_help_imports_nothing_heavy(cache: Path) -> None:
    assert _loaded("--help", cache=cache) == {"code": 0, "heavy": []}


@pytest.mark.parametrize("args", [("candidates", "list"), ("candidates", "show", "erf")])
def test_catalog_reads_import_neither_torch_nor_sympy(cache: Path, args: tuple[str, ...]) -> None:
    assert _loaded(*args, cache=cache, heavy=HEAVY + LIGHT) == {"code": 0, "heavy": []}


@pytest.mark.parametrize("formula", ["u/(1+abs(u))", "tanh(u)"])
def test_check_parses_without_torch_then_reads_its_result(cache: Path, formula: str) -> None:
    first = _loaded("candidates", "check", formula, cache=cache)
    assert first["code"] == 0 and "sympy" in first["heavy"] and "torch" not in first["heavy"]
    # A division by 1 + abs(u) is proven non-zero by sympy: no scipy minimiser is imported.
    assert "scipy" not in first["heavy"]
    again = _loaded("candidates", "check", formula, cache=cache, heavy=HEAVY + LIGHT)
    assert again == {"code": 0, "heavy": []}


@pytest.mark.parametrize("formula", ["u+", "tanh(u", "u**100", "1/0", "foo(u)"])
def test_a_syntax_error_is_refused_before_sympy_loads(cache: Path, formula: str) -> None:
    got = _loaded("candidates", "check", formula, cache=cache, heavy=HEAVY + LIGHT)
    assert got == {"code": 2, "heavy": []}


def test_with_the_checker_a_first_check_loads_nothing_heavy(cache: Path) -> None:
    """The checker process analyses; the CLI parses the syntax, asks and prints. Then
    ``candidates checker status/stop`` show and stop it."""

    def cli(*args: str) -> dict:
        env = {**os.environ, "NORMFREE_KERNEL_CACHE": str(cache / "kernels")}
        cmd = [sys.executable, "-m", "normfree", "candidates", "checker", *args, "--json"]
        done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        return json.loads(done.stdout)

    on = {"NORMFREE_CHECKER": "true"}
    try:
        for formula in ("atan(u)/(1+abs(u))", "atan(u) + 0.2*u"):
            got = _loaded("candidates", "check", formula, cache=cache, heavy=HEAVY + LIGHT, **on)
            assert got == {"code": 0, "heavy": []}
        (running,) = cli("status")["running"]
        assert running["served"] == 2
    finally:
        stopped = cli("stop")
    assert [c["pid"] for c in stopped["stopped"]] == [running["pid"]]
    assert cli("status")["running"] == [] and cli("stop")["stopped"] == []
