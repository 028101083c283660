"""Search efficiency: the compute a function search spends to find the full grid's best candidate.

Two stages, so that many searches can be measured for the price of one grid:

1. **Grid (real)**: every candidate trained once (seed 0) through the real engine (driver, Ray,
   SQLite) on a cheap preset, with per-epoch validation curves. Stored in
   ``bench/results/search-grid-<proxy>-e<epochs>.json`` and reused on later runs (``--regrid``
   forces a new one). The grid's cost is the sum of its trials' training time.
2. **Searches (replayed)**: the search normfree runs (``scheduling.make_sampler`` /
   ``make_pruner``: TPE + successive halving, same parameters) is replayed over the stored
   curves: each asked candidate reports its stored epoch values one by one to Optuna, which may
   prune it; a trial costs the epochs it actually ran; a candidate asked again costs nothing (the
   driver reuses results). The search "finds" the best when the grid's best candidate completes
   and is the best value so far. Repeated over ``--repeats`` sampler seeds; random sampling
   without pruning is replayed too, as the baseline.

Replaying is exact for a sequential search with one seed per candidate (what the grid holds); a
real run with two slots asks a little less adaptively. Goal: median fraction at most 1/3.

    .venv/bin/python bench/bench_search.py [--quick] [--regrid] [--repeats R]

Prints one JSON object as its last line; writes bench/results/search[-quick].json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def run_grid(proxy: str, functions: list[str], epochs: int) -> dict[str, Any]:
    """Train every candidate once through the engine; return its curves and costs."""
    from normfree.settings import Settings
    from normfree.specs import StudySpec
    from normfree.workers.driver import StudyDriver, create_study
    from normfree.workers.execution import RayExecutor, TrialStore

    tmp = tempfile.mkdtemp(prefix="normfree-bench-search-")
    settings = Settings(database_url=f"sqlite:///{tmp}/grid.db", trial_threads=1)
    spec = StudySpec(
        kind="options", proxy=proxy, seeds=1, functions=functions, epochs=epochs, name="grid"
    )
    executor = RayExecutor(settings, num_cpus=min(2, os.cpu_count() or 1))
    t0 = time.perf_counter()
    try:
        sid = create_study(spec, settings=settings)
        summary = StudyDriver(sid, settings=settings, executor=executor).run()
    finally:
        executor.shutdown()
    store = TrialStore(settings.database_url)
    cands: dict[str, Any] = {}
    for row in store.repo.list_trials(sid):
        curves = store.repo.get_trial(row["id"])["curves"]
        values = [c["val_loss"] if c["val_loss"] is not None else float("inf") for c in curves]
        n = max(len(values), 1)
        cands[row["candidate"]] = {
            "status": row["status"],
            "curve": values,
            "final": row["value"] if row["status"] == "COMPLETE" else None,
            "epoch_cost_s": (row["train_time_s"] or 0.0) / n,
        }
    return {
        "proxy": proxy,
        "epochs": epochs,
        "objective": "val_loss",
        "direction": "minimize",
        "candidates": cands,
        "grid_wall_s": round(time.perf_counter() - t0, 1),
        "grid_counts": summary.counts,
    }


def replay(grid: dict[str, Any], sampler: str, pruner: str, seed: int) -> dict[str, Any]:
    """One search over the stored grid; the compute it spent until it held the grid's best."""
    import optuna

    from normfree.specs import StudySpec
    from normfree.workers import scheduling as sch

    cands = grid["candidates"]
    names = sorted(cands)
    finals = {k: v["final"] for k, v in cands.items() if v["final"] is not None}
    best_name = min(finals, key=finals.__getitem__)
    grid_cost = sum(v["epoch_cost_s"] * len(v["curve"]) for v in cands.values())
    spec = StudySpec(
        kind="search",
        proxy=grid["proxy"],
        functions=names,
        epochs=grid["epochs"],
        sampler=sampler,  # type: ignore[arg-type]
        pruner=pruner,  # type: ignore[arg-type]
        params={"sampler_seed": seed},
    )
    study = optuna.create_study(
        direction="minimize", sampler=sch.make_sampler(spec), pruner=sch.make_pruner(spec)
    )
    dists = sch.search_distributions(spec)
    cost, done, asks = 0.0, {}, 0
    best_so_far: tuple[float, str] | None = None
    while asks < 4 * len(names):
        asks += 1
        trial = study.ask(fixed_distributions=dists)
        name = trial.params["norm"]
        if name in done:  # trained already: reuse, like the driver does
            state, value = done[name]
            study.tell(trial, value, state=state) if value is not None else study.tell(
                trial, state=state
            )
            continue
        c = cands[name]
        pruned = False
        for epoch, v in enumerate(c["curve"], start=1):
            cost += c["epoch_cost_s"]
            trial.report(v, epoch)
            if epoch < len(c["curve"]) and trial.should_prune():
                pruned = True
                break
        if pruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            done[name] = (optuna.trial.TrialState.PRUNED, None)
        elif c["final"] is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            done[name] = (optuna.trial.TrialState.FAIL, None)
        else:
            study.tell(trial, c["final"])
            done[name] = (optuna.trial.TrialState.COMPLETE, c["final"])
            if best_so_far is None or c["final"] < best_so_far[0]:
                best_so_far = (c["final"], name)
        if best_so_far is not None and best_so_far[1] == best_name:
            return {"found": True, "fraction": cost / grid_cost, "asks": asks, "trained": len(done)}
        if len(done) == len(names):
            break
    return {"found": False, "fraction": cost / grid_cost, "asks": asks, "trained": len(done)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--regrid", action="store_true", help="train the grid again")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--proxy", default="dit-tiny")
    ap.add_argument("--epochs", type=int, default=None)
    args = ap.parse_args()
    epochs = args.epochs or 6
    repeats = args.repeats or (10 if args.quick else 50)
    path = RESULTS / f"search-grid-{args.proxy}-e{epochs}.json"
    if args.quick and not path.exists():  # a small grid of its own; the full one when stored
        path = RESULTS / f"search-grid-{args.proxy}-e{epochs}-quick.json"
    if path.exists() and not args.regrid:
        grid = json.loads(path.read_text())
    else:
        from normfree.search_space import catalog
        from normfree.specs import BASELINES

        functions = [c.name for c in catalog.all() if c.name not in BASELINES]
        if args.quick:
            functions = functions[:8]
        grid = run_grid(args.proxy, functions, epochs)
        RESULTS.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(grid, indent=1) + "\n")

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out: dict[str, Any] = {}
    for label, sampler, pruner in (
        ("tpe+sha", "tpe", "sha"),
        ("tpe", "tpe", "none"),
        ("random", "random", "none"),
    ):
        runs = [replay(grid, sampler, pruner, seed) for seed in range(repeats)]
        fr = [r["fraction"] for r in runs if r["found"]]
        out[label] = {
            "found_rate": sum(r["found"] for r in runs) / len(runs),
            "median_fraction": round(statistics.median(fr), 4) if fr else None,
            "mean_fraction": round(statistics.fmean(fr), 4) if fr else None,
            "p_found_within_third": sum(r["found"] and r["fraction"] <= 1 / 3 for r in runs)
            / len(runs),
        }
    main_ = out["tpe+sha"]
    finals = {k: v["final"] for k, v in grid["candidates"].items() if v["final"] is not None}
    result = {
        "bench": "search",
        "mode": "quick" if args.quick else "full",
        "proxy": grid["proxy"],
        "epochs": grid["epochs"],
        "candidates": len(grid["candidates"]),
        "grid_best": min(finals, key=finals.__getitem__),
        "grid_wall_s": grid.get("grid_wall_s"),
        "repeats": repeats,
        "searches": out,
        "goal_fraction": round(1 / 3, 4),
        "goal_met": bool(
            main_["median_fraction"] is not None
            and main_["median_fraction"] <= 1 / 3
            and main_["found_rate"] >= 0.5
        ),
        "grid_file": str(path.relative_to(RESULTS.parent.parent)),
        "command": "bench/bench_search.py" + (" --quick" if args.quick else ""),
    }
    name = "search-quick.json" if args.quick else "search.json"
    (RESULTS / name).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
