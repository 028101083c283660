"""Child Python processes whose last stdout line is one JSON object: the contract of the
benchmarks' ``--quick`` runs and of the tests that measure in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def run_json(args: list[str], *, timeout: float, **run: Any) -> Any:
    """``python ARGS`` to its end (``run``: more of ``subprocess.run``'s keywords); fails the
    test with the tail of its stderr unless it exits 0, else the JSON of its last stdout line."""
    proc = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, **run
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
