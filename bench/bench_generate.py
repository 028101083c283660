"""Generative search throughput: candidates evaluated per hour, rejected before training, saved.

Runs the generative study's own loop (``workers.generate.run_generation``: grammar proposals,
validity, dedup against the catalog and everything seen, property constraints, prescreen ranking)
for a few generations, and trains the survivors with the real trainer (``train_trial``, one
thread, in this process: no Ray, no database, so the figures are the search's own costs).
Fitness for the next generation's tournaments comes from those trials, as in a study.

Reported:

- ``evaluated_per_hour``: proposals decided (rejected or trained) per hour of wall time, all
  stages and the training of survivors included; ``trained_per_hour`` likewise for survivors;
- ``fraction_rejected``: proposals rejected before any training, and by reason;
- compute saved: each proposal rejected after it parsed (duplicate, constraint, prescreen,
  ranked out) is a trial a filterless search would have run: ``trial_s_avoided`` = those x
  seeds x the mean trial time measured here; ``net_s_saved`` subtracts what filtering and
  prescreening cost. Invalid proposals (refused by the parser) are not counted as savings.

    .venv/bin/python bench/bench_generate.py [--quick] [--proxy vit-digits] [--epochs N]

Prints one JSON object as its last line; writes bench/results/generate[-quick].json.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from figures import save
from machine import describe

SAVED = ("duplicate", "constraint", "prescreen", "ranked_out")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="vit-tiny, 1 epoch, 2 generations")
    ap.add_argument("--proxy", default=None)
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--generations", type=int, default=None)
    ap.add_argument("--population", type=int, default=None)
    ap.add_argument("--constraints", default="bounded and monotone")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from tqdm import tqdm

    from normfree.kernels import KernelOptions
    from normfree.search_space import catalog
    from normfree.settings import get_settings
    from normfree.specs import NormSpec, TrialConfig
    from normfree.workers.evolution import (
        GenerateOptions,
        Individual,
        Seen,
        fitness_of,
        run_generation,
    )
    from normfree.workers.generate import summarize_records
    from normfree.workers.prescreen import prescreen
    from normfree.workers.trainer import train_trial

    proxy = args.proxy or ("vit-tiny" if args.quick else "vit-digits")
    epochs = args.epochs or (1 if args.quick else 4)
    opts = GenerateOptions(
        generations=args.generations if args.generations is not None else (1 if args.quick else 3),
        population=args.population or (3 if args.quick else 6),
        constraints=args.constraints or None,
        sampler_seed=args.seed,
    )
    t_start = time.perf_counter()
    seen = Seen(catalog.all())
    records, members = [], []
    trial_s: list[float] = []
    prescreen_calls: list[float] = []

    def screen(norm: NormSpec) -> dict:
        res = prescreen(norm, proxy)
        prescreen_calls.append(float(res.get("seconds") or 0.0))
        return res

    bar = tqdm(total=opts.generations + 1, desc="generations", file=sys.stderr)
    for g in range(opts.generations + 1):
        population = members[-opts.population :]
        record, chosen = run_generation(
            g, population, seen, opts, prescreen_fn=screen,
            rng=random.Random(f"bench:{args.seed}:{g}"),
        )  # fmt: skip
        for name, cand in chosen.items():
            t0 = time.perf_counter()
            res = train_trial(
                TrialConfig(
                    proxy=proxy, norm=NormSpec(name=name, formula=cand.formula), epochs=epochs
                ),
                kernels=KernelOptions.from_settings(get_settings()),
            )
            trial_s.append(time.perf_counter() - t0)
            members.append(Individual(name, cand.expr, g, fitness_of([res.value], res.direction)))
        records.append(record)
        bar.update(1)
    bar.close()
    wall = time.perf_counter() - t_start

    summary = summarize_records(records)
    totals = summary["totals"]
    proposed = summary["proposed"]
    trained = totals.get("train", 0)
    mean_trial = sum(trial_s) / len(trial_s) if trial_s else None
    avoidable = sum(totals.get(k, 0) for k in SAVED)
    avoided = avoidable * mean_trial if mean_trial else None
    spent = summary["filter_s"] + summary["prescreen_s"]
    best = max(members, key=lambda m: -1e9 if m.fitness is None else m.fitness, default=None)
    out = {
        "bench": "generate",
        "quick": args.quick,
        "proxy": proxy,
        "epochs": epochs,
        "generations": opts.generations,
        "population": opts.population,
        "constraints": opts.constraints,
        "seeds": 1,
        "proposed": proposed,
        "trained": trained,
        "rejected_by": {k: totals.get(k, 0) for k in ("invalid", *SAVED)},
        "fraction_rejected": summary["fraction_rejected"],
        "wall_s": round(wall, 2),
        "evaluated_per_hour": round(proposed / wall * 3600, 1),
        "trained_per_hour": round(trained / wall * 3600, 1),
        "filter_s": summary["filter_s"],
        "filter_ms_per_proposal": round(1000 * summary["filter_s"] / max(proposed, 1), 1),
        "prescreen_s": summary["prescreen_s"],
        "prescreens": len(prescreen_calls),
        "mean_trial_s": round(mean_trial, 3) if mean_trial else None,
        "trial_s_avoided": round(avoided, 1) if avoided is not None else None,
        "net_s_saved": round(avoided - spent, 1) if avoided is not None else None,
        "saved_fraction_of_filterless": (
            round(avoided / (avoided + sum(trial_s) + spent), 3) if avoided else None
        ),
        "best": {"name": best.name, "fitness": best.fitness} if best else None,
        "machine": describe(),
        "command": "bench/bench_generate.py" + (" --quick" if args.quick else ""),
    }
    save(out, "generate", args.quick)


if __name__ == "__main__":
    main()
