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
    "candidates", "train", "study", "leaderboard", "reference", "serve", "demo", "cluster",
    "export", "housekeeping", "screen",
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


# Commands that only read, compute and print: nothing of theirs is left to flush at exit but
# stdio (a stored check is a closed file). Their process ends without tearing down its heap.
QUICK_EXIT = {("candidates", "check"), ("candidates", "show"), ("candidates", "list")}


def run() -> None:
    """The console entry: :data:`main`, then for :data:`QUICK_EXIT` commands ``os._exit``.

    Why: after a first ``candidates check`` the interpreter spent 0.1-0.4 s freeing sympy's
    heap object by object (bench/bench_cli.py, "rest" of the stage split), up to a third of the
    command. Every other command exits normally: serve, studies and Ray rely on atexit.
    """
    import os
    import sys

    try:
        main(prog_name="normfree")
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
    if tuple(sys.argv[1:3]) in QUICK_EXIT:
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if not isinstance(code, int | None):
            print(code, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(code)
