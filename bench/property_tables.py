"""The Derf paper's property ablations (Tables 2-5) on the screen the README names for each.

Trains every cell of the chosen tables (operator without s, alpha0 0.5, as the paper's property
studies) for ``--seeds`` paired seeds on ``--proxy`` (default: each table's screen in
``normfree.fidelity.properties.PROPERTY_SCREENS``), appending each result to
``bench/results/property-<proxy>.jsonl`` as it arrives (``--resume`` skips finished pairs), then
judges each table with ``normfree.fidelity.properties.evaluate_table``: failed cells fail, trained
cells train, drops rank as the published ones (Spearman >= 0.7). Writes
``property-<proxy>.md`` and ``.json``.

    python bench/property_tables.py --tables flat_centre --seeds 3 --workers 2
    python bench/property_tables.py --tables growth,linear_part,clip --proxy vit-stress
    python bench/property_tables.py --quick     # vit-tiny, Table 4, 2 seeds (a smoke run)

The last line printed is one JSON object (the summary).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from calibration import run_one
from preset_fidelity import _trial
from resumable import earlier_rows, train_rows

RESULTS = Path(__file__).resolve().parent / "results"


def _fmt(v: float | None, p: int = 4) -> str:
    return "-" if v is None else f"{v:.{p}f}"


def table_markdown(got: dict[str, Any]) -> list[str]:
    rho = "-" if got["spearman_drops"] is None else f"{got['spearman_drops']:+.2f}"
    lines = [
        f"## {got['setting']}",
        "",
        f"Failed cells fail: {got['failed_cells_fail']}; trained cells train: "
        f"{got['trained_cells_train']}; Spearman of drops vs published: {rho}; "
        f"**{'pass' if got['passed'] else 'FAIL'}**"
        + (f" (misses: {', '.join(got['misses'])})" if got["misses"] else ""),
        "",
        "| cell | published | screen mean ± std (n, failed) | drop from "
        "reference (stds) | verdict | agrees |",
        "|---|---|---|---|---|---|",
    ]
    for c in got["cells"]:
        pub = "failed" if c["published"] is None else f"{c['published']:.1f}"
        if not c["measured"]:
            lines.append(f"| {c['function']} | {pub} | not run | - | - | - |")
            continue
        arm = (
            f"{_fmt(c['screen_mean'])} ± {_fmt(c['screen_std'])} "
            f"({c['screen_n']}, {c['screen_failed_seeds']} failed)"
        )
        drop = _fmt(c["drop"])
        if c["drop_in_stds"] is not None:
            drop += f" ({c['drop_in_stds']:+.1f})"
        lines.append(
            f"| {c['function']} | {pub} | {arm} | {drop} vs {c['reference_cell']} | "
            f"{c['verdict']} | {'yes' if c['agrees'] else '**no**'} |"
        )
    return [*lines, ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", default="clip,linear_part,growth,flat_centre")
    ap.add_argument("--proxy", default=None, help="default: each table's README screen")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--resume", action="store_true", help="skip pairs already in the .jsonl")
    ap.add_argument("--summarise-only", action="store_true", help="rebuild outputs from .jsonl")
    ap.add_argument("--quick", action="store_true", help="vit-tiny, Table 4, 2 seeds")
    args = ap.parse_args()
    from normfree.fidelity.properties import PROPERTY_SCREENS, evaluate_table, table_cells

    if args.quick:
        args.tables, args.proxy, args.seeds = "growth", "vit-tiny", 2
    tables = args.tables.split(",")
    by_proxy: dict[str, list[str]] = {}
    for t in tables:
        by_proxy.setdefault(args.proxy or PROPERTY_SCREENS[t], []).append(t)
    summary: dict[str, Any] = {"bench": "property_tables", "seeds": args.seeds, "proxies": {}}
    for proxy, its_tables in by_proxy.items():
        tag = proxy + ("-quick" if args.quick else "")
        jsonl = RESULTS / f"property-{tag}.jsonl"
        rows = earlier_rows(jsonl, keep=args.resume or args.summarise_only)
        done = {(r["norm"]["name"], r["seed"]) for r in rows}
        cells = list(dict.fromkeys(c for t in its_tables for c in table_cells(t)))
        jobs = [
            (proxy, {"name": c}, s, args.epochs)
            for c in cells
            for s in range(args.seeds)
            if (c, s) not in done and not args.summarise_only
        ]
        t0 = time.perf_counter()
        rows += train_rows(run_one, jobs, jsonl, workers=args.workers, desc=tag)
        wall = time.perf_counter() - t0
        trials = [t for r in rows if r["seed"] < args.seeds and (t := _trial(r)) is not None]
        trials = [t for _, t in trials]
        judged = [evaluate_table(t, trials) for t in its_tables]
        argv = [a for a in sys.argv[1:] if a != "--summarise-only"]
        md = [
            f"# Property ablations (Derf Tables 2-5) on `{proxy}`, {args.seeds} seeds",
            "",
            f"Command: `python bench/property_tables.py {' '.join(argv)}`",
            "",
            "Operator without s, alpha0 0.5 (as the paper's property studies). A cell *fails* "
            "when it failed to train on most seeds or sits >= 3 pooled seed stds below its "
            "row's reference (its base, or the row's best published cell where the base failed "
            "at scale); drops are ranked against the published ones (a failure is the largest).",
            "",
        ]
        for got in judged:
            md += table_markdown(got)
        seconds = [r["seconds"] for r in rows]
        md.append(
            f"{len(rows)} trials, {sum(seconds) / max(1, len(seconds)):.0f} s of wall per trial "
            f"(this run: {wall:.0f} s with {args.workers} workers)."
        )
        (RESULTS / f"property-{tag}.md").write_text("\n".join(md) + "\n")
        (RESULTS / f"property-{tag}.json").write_text(json.dumps(judged, indent=1) + "\n")
        print("\n".join(md))
        summary["proxies"][proxy] = {
            g["table"]: {
                "passed": g["passed"],
                "failed_cells_fail": g["failed_cells_fail"],
                "trained_cells_train": g["trained_cells_train"],
                "spearman_drops": g["spearman_drops"],
                "misses": g["misses"],
            }
            for g in judged
        }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
