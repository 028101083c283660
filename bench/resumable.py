"""Resumable training benchmarks: one JSON row per trial, appended to a .jsonl as it finishes.

``calibration.py``, ``discriminative.py`` and ``stability.py`` train many (function, seed)
trials that take hours in all; each keeps its rows in ``bench/results/<name>.jsonl`` so a run
stopped early keeps what finished and ``--resume`` trains only the rest. This is that machinery,
once: reading the rows back, and a pool of one-thread worker processes that writes each row the
moment its trial ends.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The held-out metric that goes with each objective (``val_acc`` is chosen on, ``test_acc``
# reported).
TEST_OF = {"val_acc": "test_acc", "val_loss": "test_loss"}


def earlier_rows(jsonl: Path, keep: bool) -> list[dict[str, Any]]:
    """The rows of an earlier run when ``keep`` (``--resume``, ``--summarise-only``); otherwise
    the file is removed, so a new run starts from nothing."""
    if keep and jsonl.exists():
        return [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
    jsonl.unlink(missing_ok=True)
    return []


def train_rows(
    run_one: Callable[[Any], dict[str, Any]],
    jobs: list[Any],
    jsonl: Path,
    *,
    workers: int,
    desc: str,
) -> list[dict[str, Any]]:
    """``run_one(job)`` for every job in ``workers`` worker processes, in the order they finish;
    each row is appended (and flushed) to ``jsonl`` as it arrives. The workers are spawned, not
    forked: a fork of a process whose OpenMP/torch thread pools are running can deadlock."""
    if not jobs:
        return []
    from tqdm import tqdm

    rows = []
    with (
        mp.get_context("spawn").Pool(workers, maxtasksperchild=8) as pool,
        jsonl.open("a") as fh,
    ):
        for row in tqdm(
            pool.imap_unordered(run_one, jobs), total=len(jobs), desc=desc, file=sys.stderr
        ):
            rows.append(row)
            fh.write(json.dumps(row) + "\n")
            fh.flush()
    return rows


def rescoring(source: str, proxy: str) -> tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]:
    """``--rescore-from``: (``proxy``'s objective, metrics -> metrics with it added), for a
    preset that trains exactly as ``source`` (normfree.workers.rescore); exits with the reason
    otherwise."""
    from normfree.workers.proxies import PROXIES
    from normfree.workers.rescore import check_rescorable, rescored_metrics

    try:
        sizes = check_rescorable(source, proxy)
    except ValueError as exc:
        raise SystemExit(str(exc)) from exc
    return PROXIES[proxy].objective, lambda metrics: rescored_metrics(metrics, sizes)


def run_arguments(
    doc: str, proxy: str, seeds: int, seeds_help: str | None = None, rescore: bool = True
) -> argparse.ArgumentParser:
    """The options every resumable run shares (proxy, seeds, workers, epochs, resume,
    summarise-only and, where the script can rescore, rescore-from); each script adds its own."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--proxy", default=proxy)
    ap.add_argument("--seeds", type=int, default=seeds, help=seeds_help)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--resume", action="store_true", help="skip pairs already in the .jsonl")
    ap.add_argument(
        "--summarise-only", action="store_true", help="rebuild the outputs from the .jsonl"
    )
    if rescore:
        ap.add_argument(
            "--rescore-from",
            default=None,
            metavar="PROXY",
            help="start from PROXY's rows, rescored (a preset that differs only in objective)",
        )
    return ap
