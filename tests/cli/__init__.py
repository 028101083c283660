"""Tests of the ``normfree`` command; :func:`run` and :func:`run_json` invoke it through click."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner


def run(*args: str) -> tuple[int, str]:
    """Exit code and output of ``normfree ARGS`` (exceptions propagate: a crash fails the test)."""
    from normfree.cli import main

    res = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return res.exit_code, res.output


def run_json(*args: str) -> Any:
    """The JSON object ``normfree ARGS --json`` prints last; the command must succeed."""
    code, out = run(*args, "--json")
    assert code == 0, out
    return json.loads(out.strip().splitlines()[-1])
