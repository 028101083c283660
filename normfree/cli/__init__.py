"""The ``normfree`` command: thin. It parses, calls the layer below, and prints.

Each command group lives in its own module and registers itself on :data:`main`; every command
that prints a result takes ``--json`` (see :func:`normfree.cli._output.emit`).
"""

from __future__ import annotations

import importlib

import click

from normfree import __version__

# Command modules, imported in this order to register their groups on ``main``.
COMMAND_MODULES = (
    "candidates", "train", "study", "leaderboard", "reference", "serve", "demo", "cluster"
)  # fmt: skip


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="normfree")
def main() -> None:
    """normfree: can a pointwise function replace LayerNorm? Measure it."""


for _name in COMMAND_MODULES:
    try:
        importlib.import_module(f"normfree.cli.{_name}")
    except ModuleNotFoundError as exc:  # a command module not written yet
        if exc.name != f"normfree.cli.{_name}":
            raise
