"""CLI start-up: seconds per quick command, each in a fresh interpreter, as a user runs it.

Budget (issue 17): ``normfree --help`` and ``normfree candidates check/show/list`` within 0.5 s
on an idle core. Each command runs ``--repeat`` times as ``python -m normfree ...`` and the
median is kept, both in wall time and in the child's CPU time (user + system): on a shared
machine the wall time also counts the time other processes held the core, so the budget is
judged on CPU time and the 1-minute load average is recorded beside each figure. The catalog
index is built once before timing (the first command after an install or a change to
``search_space`` pays that build, ~2 s, once).

``check`` is timed twice: the first check of a formula (its stored result removed before every
run: parse, sympy, properties, duplicate search) and the same formula checked again (the
stored result read back, see ``normfree.search_space.checks``). A formula with a syntax error
is refused before sympy loads.

    python bench/bench_cli.py            # 7 runs per command: bench/results/cli.json
    python bench/bench_cli.py --quick    # 3 runs per command: bench/results/cli-quick.json

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from figures import save
from machine import describe

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's normfree, for the stored check results
BUDGET_S = 0.5
CHECKED = {"": "u/(1+abs(u))", " (no division)": "tanh(u) + 0.1*u"}
# label -> (arguments, formula whose stored check result is removed before each run, or None)
COMMANDS: dict[str, tuple[list[str], str | None]] = {
    "--help": (["--help"], None),
    **{
        f"candidates check{tag}, first time": (["candidates", "check", formula], formula)
        for tag, formula in CHECKED.items()
    },
    **{
        f"candidates check{tag}, again": (["candidates", "check", formula], None)
        for tag, formula in CHECKED.items()
    },
    "candidates check, syntax error": (["candidates", "check", "u+"], None),
    "candidates show": (["candidates", "show", "erf"], None),
    "candidates list": (["candidates", "list"], None),
}


def run_once(args: list[str], fresh: str | None = None) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one ``python -m normfree ARGS``; ``fresh``: a
    formula checked as if for the first time (its stored result removed first)."""
    if fresh is not None:
        from normfree.search_space.checks import stored_path

        stored_path(fresh).unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "normfree", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    wall = time.perf_counter() - t0
    if done.returncode not in (0, 2):  # 2: a refused formula, as meant
        raise SystemExit(f"normfree {' '.join(args)} failed with status {done.returncode}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


# A first check's CPU time split into what it does, in the order the command does it: each
# stage's CPU in a fresh interpreter (the stages' sum plus the interpreter's start is the total).
_STAGES = """
import json, resource, sys
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
out, t = {"python start": cpu()}, cpu()
def stage(label):
    global t
    now = cpu()
    out[label], t = now - t, now
import normfree.cli.candidates
stage("click + normfree.cli")
from normfree.settings import get_settings
get_settings()
stage("settings (pydantic-settings)")
import numpy
stage("import numpy")
import sympy
stage("import sympy")
from normfree.search_space import candidate, catalog_index, properties
stage("search_space modules (pydantic models, grids)")
c = candidate.parse(sys.argv[1])
stage("parse, derivative, domain check (limits at +-inf)")
c.to_dict()
stage("properties")
catalog_index.duplicate_of(c)
stage("duplicate search (catalog index)")
print(json.dumps(out))
"""


def breakdown(formula: str, repeat: int) -> dict[str, float]:
    """Median CPU seconds of each stage of a first ``candidates check FORMULA``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", _STAGES, formula],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        for _ in range(repeat)
    ]
    return {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 runs per command (< 30 s)")
    ap.add_argument("--repeat", type=int, default=None)
    a = ap.parse_args()
    repeat = a.repeat or (3 if a.quick else 7)
    run_once(["candidates", "list"])  # build the catalog index if this checkout has none yet
    rows = {}
    for label, (args, fresh) in COMMANDS.items():
        load = os.getloadavg()[0]
        runs = [run_once(args, fresh) for _ in range(repeat)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        rows[label] = {
            "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3),
            "within_budget": cpu <= BUDGET_S,
            "load_avg_1m": round(load, 2),
        }
        print(f"{label:48s} wall {wall:6.3f} s   cpu {cpu:6.3f} s   load {load:.2f}")
    stages = {}
    for tag, formula in CHECKED.items():
        parts = breakdown(formula, repeat)
        # What the split cannot see: the command writing its result and the interpreter's exit
        # (freeing every sympy object), from the same command timed whole above.
        whole = rows[f"candidates check{tag}, first time"]["cpu_s"]
        parts["rest: store the result, interpreter exit"] = round(whole - sum(parts.values()), 3)
        stages[formula] = parts
    for formula, parts in stages.items():
        print(f"first check of {formula}: " + ", ".join(f"{k} {v:.3f}" for k, v in parts.items()))
    out = {
        "bench": "cli",
        "quick": a.quick,
        "repeat": repeat,
        "budget_s": BUDGET_S,
        **{k: v for k, v in describe().items() if k in ("cpu", "cores", "python")},
        "seconds": {k: v["cpu_s"] for k, v in rows.items()},
        "commands": rows,
        "first_check_cpu_s_by_stage": stages,
    }
    save(out, "cli", a.quick)


if __name__ == "__main__":
    main()
