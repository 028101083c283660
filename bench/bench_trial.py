"""Trial speed: training samples/s per proxy and the default trials' wall times on one thread.

Budgets: a trial of the default screens (vit-screen-heldout, dit-screen; one candidate, one
seed) within 90 s on one CPU core (issue 14); the previous defaults keep theirs (vit-digits
60 s, dit-digits 120 s, issue 4). Trials run on one thread, so the budget is judged on the
process's CPU time (what the trial costs an idle core); wall time is recorded beside it.
``--quick`` (< 30 s on an idle core) trains the tiny presets
and two epochs of each default preset and *extrapolates* the default trial time from them
(``estimated: true``); the full run trains the default trials end to end. The 1-minute load
average is recorded beside each figure: on a shared machine it explains a slow run.

    python bench/bench_trial.py            # full: writes bench/results/trial.json
    python bench/bench_trial.py --quick    # writes bench/results/trial-quick.json

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse

import torch
from figures import save, timed_trial
from machine import describe

# the default screens (issue 14: a trial within 90 s on one idle core), then the previous ones
BUDGET_S = {"vit-screen-heldout": 90.0, "dit-screen": 90.0, "vit-digits": 60.0, "dit-digits": 120.0}


def run(proxy: str, norm: str, epochs: int | None = None) -> dict:
    from normfree.specs import TrialConfig
    from normfree.workers.trainer import parse_norm

    r, cost = timed_trial(TrialConfig(proxy=proxy, norm=parse_norm(norm), epochs=epochs))
    return {
        "proxy": proxy,
        "norm": norm,
        "epochs": epochs or r.config["epochs"],
        **cost,
        "objective": r.objective,
        "value": r.value,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--norm", default="derf")
    args = ap.parse_args()
    rows = [run("vit-tiny", args.norm), run("dit-tiny", args.norm)]
    defaults = []
    for proxy, budget in BUDGET_S.items():
        if args.quick:
            from normfree.workers.proxies import PROXIES

            short = run(proxy, args.norm, epochs=2)
            full_epochs = PROXIES[proxy].epochs
            share = short["cpu_s"] / max(short["wall_s"], 1e-9)  # this process's core share
            per_epoch = short["train_time_s"] * share / 2
            est = per_epoch * full_epochs + short["cpu_s"] - short["train_time_s"] * share
            rows.append(short)
            defaults.append(
                {
                    "proxy": proxy,
                    "cpu_s": est,
                    "budget_s": budget,
                    "estimated": True,
                    "within_budget": est <= budget,
                }
            )
        else:
            full = run(proxy, args.norm)
            rows.append(full)
            defaults.append(
                {
                    "proxy": proxy,
                    "cpu_s": full["cpu_s"],
                    "wall_s": full["wall_s"],
                    "budget_s": budget,
                    "estimated": False,
                    "within_budget": full["cpu_s"] <= budget,
                    "value": full["value"],
                    "objective": full["objective"],
                }
            )
    out = {
        "bench": "trial",
        "quick": args.quick,
        "threads": 1,
        "machine": describe(),
        "torch": torch.__version__,
        "runs": rows,
        "default_trials": defaults,
        "samples_per_cpu_s": {r["proxy"]: r["samples_per_cpu_s"] for r in rows},
    }
    save(out, "trial", args.quick)


if __name__ == "__main__":
    main()
