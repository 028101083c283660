"""Shared output helpers: one place decides how a result is printed for people and for scripts."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print the result as one JSON object (for scripts)."
)


def emit(result: Any, as_json: bool, human: Callable[[Any], None]) -> None:
    """Print ``result`` as JSON when asked, else through the ``human`` renderer."""
    if as_json:
        click.echo(json.dumps(result, indent=None, sort_keys=True, default=str))
    else:
        human(result)


def fail(message: str, as_json: bool, code: int = 2, **extra: Any) -> NoReturn:
    """Exit non-zero with the reason, as JSON on stdout when ``--json`` was given."""
    if as_json:
        click.echo(json.dumps({"error": message, **extra}, sort_keys=True, default=str))
    else:
        click.echo(f"error: {message}", err=True)
    sys.exit(code)


def amount(x: float) -> str:
    """A non-negative amount for people: thousands separated, and a small one not rounded to
    "0" (a one-epoch smoke trial is estimated at a fraction of a trial-second)."""
    return f"{x:,.0f}" if x >= 1 or x == 0 else f"{x:.2g}"
