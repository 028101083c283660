"""``python -m normfree``: the same command as the ``normfree`` script."""

from normfree.cli import run

run()
