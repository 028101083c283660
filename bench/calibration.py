"""Calibration of a screen against science.md section 7: facts table and fidelity report.

Trains, on one preset, every cell the calibration facts need (normfree.fidelity.facts: LayerNorm,
RMSNorm, DyT, Derf, the identity, tanh with alpha fixed at 1 for ViT screens) for ``--seeds``
seeds, and optionally every other cell of the built-in reference set for the same model family
(hardtanh, sigmoid, their fixed-alpha ablations, the shift ablations of erf/tanh/arctan) for
``--published-seeds`` seeds. Trials run in a pool of one-thread worker processes; each result
is appended to ``bench/results/calibration-<proxy>.jsonl`` as it arrives (``--resume`` skips
finished pairs).

Then every result is written, through the real write path (Repository.finish_trial), into a
fresh SQLite database ``bench/results/calibration-<proxy>.db`` (not committed; rebuilt from the
.jsonl by ``--summarise-only``), so that

    normfree fidelity --proxy <proxy> --db sqlite:///bench/results/calibration-<proxy>.db

prints the same fidelity report this script saves in ``calibration-<proxy>-fidelity.txt``.
Outputs: ``calibration-<proxy>.md`` (each fact, its value, pass/fail) and ``.json``.

    python bench/calibration.py --proxy vit-screen --seeds 5 --published-seeds 3 --workers 2
    python bench/calibration.py --proxy dit-screen --seeds 5 --workers 2
    python bench/calibration.py --quick       # vit-tiny (2 epochs), fact cells, 2 seeds
    python bench/calibration.py --proxy vit-screen-heldout --rescore-from vit-screen \
        --seeds 10 --published-seeds 3  # the same runs ranked on all held-out images

The last line printed is one JSON object (the summary).
"""

from __future__ import annotations

import io
import json
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

from resumable import earlier_rows, rescoring, run_arguments, train_rows

RESULTS = Path(__file__).resolve().parent / "results"


def run_one(job: tuple[str, dict[str, Any], int, int | None]) -> dict[str, Any]:
    """Train one (cell, seed); the result as JSON (curves kept, diagnostics dropped)."""
    proxy, norm, seed, epochs = job
    import torch

    torch.set_num_threads(1)
    from normfree.kernels import KernelOptions
    from normfree.settings import get_settings
    from normfree.specs import NormSpec, TrialConfig
    from normfree.workers.trainer import train_trial

    t0 = time.perf_counter()
    cfg = TrialConfig(proxy=proxy, norm=NormSpec(**norm), seed=seed, epochs=epochs)
    r = train_trial(cfg, kernels=KernelOptions.from_settings(get_settings()))
    return {
        "proxy": proxy,
        "norm": norm,
        "seed": seed,
        "config": cfg.model_dump(mode="json"),
        "result": r.model_dump(mode="json", exclude={"diagnostics"}),
        "seconds": time.perf_counter() - t0,
    }


def _cells(family: str, published: bool) -> tuple[list[Any], list[Any]]:
    """(fact cells, other published cells of the family), each cell once."""
    from normfree.fidelity.facts import cells_for
    from normfree.fidelity.published import PROPERTY_TABLES
    from normfree.fidelity.published import published as builtin
    from normfree.fidelity.reference import cell_key

    facts = cells_for(family)
    seen = {cell_key(c) for c in facts}
    # the property tables (Derf Tables 2-5) belong to the screens the README names for each
    # property and are trained by bench/property_tables.py, not with every calibration
    tables = {setting for setting, _ in PROPERTY_TABLES.values()}
    others = []
    if published:
        for row in builtin().rows:
            if row.setting in tables:
                continue
            if row.family == family and cell_key(row.cell) not in seen:
                seen.add(cell_key(row.cell))
                others.append(row.cell)
    return facts, others


def rescore(rows: list[dict[str, Any]], source: str, proxy: str) -> list[dict[str, Any]]:
    """``source``'s results as ``proxy``'s (normfree.workers.rescore: the same runs ranked by
    a heldout objective). Rescored results carry ``worker="rescored:<source>"``; their curves
    keep the source's per-epoch metrics."""
    from normfree.workers.proxies import PROXIES

    objective, rescored = rescoring(source, proxy)
    out = []
    for r in rows:
        res = dict(r["result"])
        res.update(
            metrics=rescored(res.get("metrics") or {}),
            objective=objective,
            direction=PROXIES[proxy].direction,  # a loss objective is minimised
            worker=f"rescored:{source}",
        )
        out.append({**r, "proxy": proxy, "config": {**r["config"], "proxy": proxy}, "result": res})
    return out


def write_database(rows: list[dict[str, Any]], path: Path) -> str:
    """A fresh SQLite database holding every result as a finished trial of one study."""
    from normfree.specs import StudySpec, TrialConfig, TrialResult
    from normfree.storage import Database, Repository

    if path.exists():
        path.unlink()
    url = f"sqlite:///{path}"
    db = Database(url)
    try:
        db.migrate()
        repo = Repository(db, max_attempts=3)
        proxy = rows[0]["proxy"]
        sid = repo.create_study(StudySpec(kind="options", name="calibration", proxy=proxy))
        by_key = {}
        for r in rows:
            cfg = TrialConfig.model_validate(r["config"])
            by_key[cfg.key()] = r
        repo.add_trials(sid, [TrialConfig.model_validate(r["config"]) for r in by_key.values()])
        repo.set_study_status(sid, "running")
        while (lease := repo.lease_next(sid, "calibration", 600)) is not None:
            row = by_key[lease.config.key()]
            result = TrialResult.model_validate(row["result"])
            repo.finish_trial(lease.id, "calibration", lease.attempt, result)
        repo.set_study_status(sid, "complete")
    finally:
        db.dispose()
    return url


def facts_markdown(proxy: str, evaluated: list[dict[str, Any]], cmd: str, seeds: int) -> str:
    def f(v: float | None, p: int = 4) -> str:
        return "-" if v is None else f"{v:.{p}f}"

    def arm(a: dict[str, Any]) -> str:
        if a["failed"]:
            return f"failed ({a['failed_seeds']}/{a['failed_seeds'] + a['n']} seeds)"
        extra = f", {a['failed_seeds']} failed" if a["failed_seeds"] else ""
        return f"{f(a['mean'])} ± {f(a['std'])} (n={a['n']}{extra})"

    lines = [
        f"# Calibration of `{proxy}` against science.md section 7 ({seeds} seeds)",
        "",
        f"Command: `{cmd}`",
        "",
        "Values are the preset's objective (mean ± seed std); sigma is the pooled seed std of "
        "the two cells; the difference is in goodness (positive: the subject is better).",
        "",
        "| fact | subject | versus | difference (sigmas) | result |",
        "|---|---|---|---|---|",
    ]
    for e in evaluated:
        verdict = {True: "**pass**", False: "**FAIL**", None: "not measured"}[e["passed"]]
        diff = "-" if e["difference"] is None else f"{e['difference']:+.4f}"
        if e["difference_in_stds"] is not None:
            diff += f" ({e['difference_in_stds']:+.2f})"
        lines.append(
            f"| {e['claim']} | {e['subject']['cell']}: {arm(e['subject'])} | "
            f"{e['versus']['cell']}: {arm(e['versus'])} | {diff} | {verdict} |"
        )
    lines += ["", "Sources: " + "; ".join(dict.fromkeys(e["source"] for e in evaluated)) + "."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = run_arguments(__doc__, "vit-screen", 5, seeds_help="seeds of the fact cells")
    ap.add_argument(
        "--published-seeds",
        type=int,
        default=0,
        help="seeds of the other published cells (0: skip)",
    )
    ap.add_argument("--quick", action="store_true", help="vit-tiny, fact cells, 2 seeds")
    args = ap.parse_args()
    if args.quick:
        args.proxy, args.seeds, args.published_seeds = "vit-tiny", 2, 0
    from normfree.fidelity.facts import evaluate_all
    from normfree.workers.proxies import PROXIES

    preset = PROXIES[args.proxy]
    family = preset.family
    fact_cells, other_cells = _cells(family, args.published_seeds > 0)
    tag = args.proxy + ("-quick" if args.quick else "")
    RESULTS.mkdir(parents=True, exist_ok=True)
    jsonl = RESULTS / f"calibration-{tag}.jsonl"
    rows = earlier_rows(jsonl, keep=args.resume or args.summarise_only)
    if args.rescore_from and not rows:
        source = RESULTS / f"calibration-{args.rescore_from}.jsonl"
        src_rows = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
        rows = rescore(src_rows, args.rescore_from, args.proxy)
        jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = {(json.dumps(r["norm"], sort_keys=True), r["seed"]) for r in rows}
    plan = [(c, s) for c in fact_cells for s in range(args.seeds)]
    plan += [(c, s) for c in other_cells for s in range(args.published_seeds)]
    jobs = [
        (args.proxy, c.norm_fields(), s, args.epochs)
        for c, s in plan
        if (json.dumps(c.norm_fields(), sort_keys=True), s) not in done and not args.summarise_only
    ]
    t0 = time.perf_counter()
    rows += train_rows(run_one, jobs, jsonl, workers=args.workers, desc=tag)
    wall = time.perf_counter() - t0
    # the table covers the planned seeds only: a .jsonl with 10 seeds summarised with --seeds 5
    # reports seeds 0-4 (the 5-seed bar) without retraining anything
    planned = {(json.dumps(c.norm_fields(), sort_keys=True), s) for c, s in plan}
    rows = [r for r in rows if (json.dumps(r["norm"], sort_keys=True), r["seed"]) in planned]
    if not rows:
        print(json.dumps({"proxy": args.proxy, "error": "no results"}))
        return

    # the real write path, then the same report `normfree fidelity` prints
    url = write_database(rows, RESULTS / f"calibration-{tag}.db")
    from normfree.fidelity.report import headline
    from normfree.storage import Database
    from normfree.storage.references import ReferenceStore
    from normfree.workers.fidelity import fidelity_report

    db = Database(url)
    try:
        trials, _ = ReferenceStore(db).proxy_trials(proxy=args.proxy)
        report = fidelity_report(db, proxy=args.proxy)
    finally:
        db.dispose()
    evaluated = evaluate_all(family, trials)
    argv = [a for a in sys.argv[1:] if a != "--summarise-only"]
    cmd = "python " + " ".join(["bench/calibration.py", *argv])
    md = facts_markdown(args.proxy, evaluated, cmd, args.seeds)
    passed = [e["passed"] for e in evaluated if e["passed"] is not None]
    md += f"\n{sum(passed)}/{len(passed)} measurable facts hold.\n"
    from normfree.cli.reference import print_report

    text = io.StringIO()
    with redirect_stdout(text):
        print_report(report)
    fidelity_cmd = (
        f"normfree fidelity --proxy {args.proxy} --db {url.replace(str(RESULTS), 'bench/results')}"
    )
    (RESULTS / f"calibration-{tag}-fidelity.txt").write_text(
        f"$ {fidelity_cmd}\n\n{text.getvalue()}"
    )
    md += f"\nFidelity against the built-in set (`{fidelity_cmd}`): {headline(report)}\n"
    (RESULTS / f"calibration-{tag}.md").write_text(md)
    seconds = [r["seconds"] for r in rows]
    out = {
        "proxy": args.proxy,
        "family": family,
        "seeds": args.seeds,
        "published_seeds": args.published_seeds,
        "trials": len(rows),
        "wall_s": wall,
        "mean_trial_s": sum(seconds) / len(seconds),
        "facts_passed": sum(passed),
        "facts_measured": len(passed),
        "facts": [
            {k: e[k] for k in ("claim", "passed", "difference", "difference_in_stds")}
            for e in evaluated
        ],
        "fidelity": report["summary"],
        "command": cmd,
    }
    (RESULTS / f"calibration-{tag}.json").write_text(
        json.dumps({**out, "evaluated": evaluated}, indent=1) + "\n"
    )
    print(md)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
