"""Stability: does a stress preset separate stable from unstable norms?

For each function (LayerNorm, RMSNorm, identity and the 16 search candidates) and seed, runs the
zero-cost prescreen and then the full trial on the preset, in a pool of one-thread worker
processes (``bench/discriminative.py``'s machinery: same resumable ``.jsonl``, same summary).
Each row records the trial's status and objective, the first loss-spike step, the largest
activation magnitude / pre-norm std / norm-output magnitude seen while training, and the
prescreen's instability prediction, so the table answers three questions:

- the bar: identity diverges (or ends >= 5 pooled seed stds worse than LayerNorm) on every seed,
  while LayerNorm and erf complete every seed;
- mean +- 95% CI and diverged counts for every function;
- how often the prescreen's "unstable" matches the trial's "diverged" (agreement rate).

    python bench/stability.py --proxy vit-stress --seeds 5 --workers 2
    python bench/stability.py --proxy dit-stress --seeds 5 --workers 2 --resume
    python bench/stability.py --quick     # vit-stress, 3 functions, 1 seed, 3 epochs

Results: ``bench/results/stability-<proxy>.{jsonl,md,json}``; the last line printed is one JSON
object (the summary).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from pathlib import Path

from discriminative import add_operator_argument, operator_shift, search_16, summarise, trial_row
from resumable import earlier_rows, run_arguments, train_rows

RESULTS = Path(__file__).resolve().parent / "results"
BASELINE_ORDER = ("layernorm", "rmsnorm", "identity")
BAR_SIGMAS = 5.0  # issue 9: identity must end >= 5 seed stds below LayerNorm (or diverge)
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}


def run_one(job: tuple[str, str, int, int | None, str]) -> dict:
    """Prescreen then train one (function, seed); a JSON-friendly row."""
    proxy, name, seed, epochs, shift = job
    import torch

    torch.set_num_threads(1)
    from normfree.specs import NormSpec
    from normfree.workers import diagnostics
    from normfree.workers.prescreen import prescreen

    t0 = time.perf_counter()
    ps = prescreen(NormSpec(name=name, shift=shift), proxy=proxy, seed=seed)
    t1 = time.perf_counter()
    r, row = trial_row(proxy, name, seed, epochs, shift)
    stab = diagnostics.stability(r.diagnostics)
    return {
        **row,
        "spike_step": r.spike_step,
        "stability": {k: v for k, v in stab.items() if k != "layers"},
        "prescreen": {
            k: ps.get(k)
            for k in ("unstable", "survives", "out_growth", "loss_ratio", "steps", "lr", "seconds")
        },
        "prescreen_s": t1 - t0,
    }


def ci95(vals: list[float]) -> float | None:
    """Half-width of the 95% t-interval of the mean (None for fewer than 2 values)."""
    if len(vals) < 2:
        return None
    return T95.get(len(vals) - 1, 1.96) * statistics.stdev(vals) / math.sqrt(len(vals))


def bar_check(rows: list[dict], direction: str) -> dict:
    """Issue 9's bar: identity fails on every seed, LayerNorm and erf complete every seed.

    An identity seed fails when it diverged, or ended worse than LayerNorm's mean by at least
    ``BAR_SIGMAS`` x the pooled seed std (RMS of LayerNorm's and the completed identity seeds'
    stds; LayerNorm's alone when fewer than two identity seeds completed)."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["function"], []).append(r)

    def vals(f: str) -> list[float]:
        return [r["value"] for r in by.get(f, []) if r["status"] == "complete"]

    ln, ident = vals("layernorm"), vals("identity")
    sign = 1.0 if direction == "maximize" else -1.0
    stds = [statistics.stdev(v) for v in (ln, ident) if len(v) > 1]
    pooled = math.sqrt(statistics.fmean(s * s for s in stds)) if stds else None
    ln_mean = statistics.fmean(ln) if ln else None
    fails, gaps = 0, []
    for r in by.get("identity", []):
        if r["status"] == "diverged":
            fails += 1
        elif r["status"] == "complete" and ln_mean is not None and pooled:
            gaps.append(sign * (ln_mean - r["value"]) / pooled)  # in pooled seed stds
            fails += gaps[-1] >= BAR_SIGMAS
    normal = {
        f: sum(r["status"] == "complete" for r in by.get(f, [])) == len(by.get(f, [])) > 0
        for f in ("layernorm", "erf")
    }
    n_id = len(by.get("identity", []))
    return {
        "identity_failed_seeds": fails,
        "identity_seeds": n_id,
        "pooled_seed_std": pooled,
        "completed_identity_gaps_in_std": gaps,
        "layernorm_and_erf_complete": normal,
        "passes": n_id > 0 and fails == n_id and all(normal.values()),
    }


def prescreen_agreement(rows: list[dict]) -> dict:
    """How often the prescreen's ``unstable`` equals the trial's ``diverged``, per trial."""
    pairs = [
        (bool(r["prescreen"]["unstable"]), r["status"] == "diverged")
        for r in rows
        if r["prescreen"].get("unstable") is not None and r["status"] in ("complete", "diverged")
    ]
    tp = sum(p and d for p, d in pairs)
    fp = sum(p and not d for p, d in pairs)
    fn = sum(d and not p for p, d in pairs)
    return {
        "trials": len(pairs),
        "agree": sum(p == d for p, d in pairs),
        "rate": (sum(p == d for p, d in pairs) / len(pairs)) if pairs else None,
        "true_unstable": tp,
        "false_alarm": fp,
        "missed": fn,
    }


def spike_of(r: dict) -> int | None:
    """The first spike step; a divergence counts as one (rows written before the trainer did)."""
    steps = [s for s in (r.get("spike_step"), r.get("diverged_at_step")) if s is not None]
    return min(steps) if steps else None


def table(rows: list[dict], functions: list[str]) -> list[dict]:
    base = {t["function"]: t for t in summarise(rows, functions)["table"]}
    out = []
    for f in functions:
        rs = [r for r in rows if r["function"] == f]
        vals = [r["value"] for r in rs if r["status"] == "complete" and r["value"] is not None]
        spikes = [s for s in map(spike_of, rs) if s is not None]
        outmax = [r["stability"].get("max_train_out_absmax") for r in rs]
        outmax = [v for v in outmax if v is not None]
        out.append(
            {
                **base[f],
                "ci95": ci95(vals),
                "spiked": len(spikes),
                "first_spike_median": statistics.median(spikes) if spikes else None,
                "out_absmax_max": max(outmax) if outmax else None,
                "prescreen_unstable": sum(bool(r["prescreen"].get("unstable")) for r in rs),
            }
        )
    return out


def markdown(rows_t: list[dict], head: dict, cmd: str) -> str:
    rev = head["direction"] == "maximize"

    def key(t: dict):
        return (t["mean"] is None, -(t["mean"] or 0) if rev else (t["mean"] or 0))

    def f(v, p: int = 4) -> str:
        return "-" if v is None else f"{v:.{p}f}"

    def g(v) -> str:
        return "-" if v is None else f"{v:.3g}"

    lines = [
        f"# Stability of `{head['proxy']}` ({head['objective']}, {head['direction']})",
        "",
        f"Command: `{cmd}`",
        "",
        "| function | mean ± 95% CI | seed std | complete/runs | diverged | spiked (median "
        "step) | max norm-output abs | prescreen unstable | s/trial |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for t in sorted(rows_t, key=key):
        spike = f"{t['spiked']}" + (
            f" ({t['first_spike_median']:.0f})" if t["first_spike_median"] is not None else ""
        )
        lines.append(
            f"| {t['function']} | {f(t['mean'])} ± {f(t['ci95'])} | {f(t['std'])} "
            f"| {t['complete']}/{t['runs']} | {t['diverged']} | {spike} | {g(t['out_absmax_max'])} "
            f"| {t['prescreen_unstable']}/{t['runs']} | {f(t['seconds'], 1)} |"
        )
    bar, ag = head["bar"], head["prescreen_agreement"]
    lines += [
        "",
        f"- bar (identity fails every seed; LayerNorm and erf complete every seed): "
        f"**{'PASS' if bar['passes'] else 'FAIL'}** — identity failed "
        f"{bar['identity_failed_seeds']}/{bar['identity_seeds']} seeds; pooled seed std "
        f"{f(bar['pooled_seed_std'])}; completed identity seeds end "
        f"{[round(x, 1) for x in bar['completed_identity_gaps_in_std']]} pooled stds worse than "
        f"LayerNorm; complete every seed: {bar['layernorm_and_erf_complete']}",
        f"- prescreen 'unstable' vs trial 'diverged': {ag['agree']}/{ag['trials']} agree "
        f"(rate {f(ag['rate'], 2)}; {ag['true_unstable']} caught, {ag['false_alarm']} false "
        f"alarms, {ag['missed']} missed)",
        f"- finished {head['finished_trials']} of {head['planned_trials']} trials",
    ]
    if head["finished_trials"] < head["planned_trials"]:
        lines.append("- PARTIAL: rerun the command with --resume to finish the remaining trials")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = run_arguments(__doc__, "vit-stress", 5, rescore=False)
    ap.add_argument("--functions", default=None, help="comma-separated (default: 3 + 16)")
    ap.add_argument("--quick", action="store_true", help="3 functions, 1 seed, 3 epochs")
    add_operator_argument(ap)
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.epochs = 1, args.epochs or 3
        args.functions = args.functions or "layernorm,identity,erf"
    functions = args.functions.split(",") if args.functions else [*BASELINE_ORDER, *search_16()]
    from normfree.workers.proxies import PROXIES

    preset = PROXIES[args.proxy]
    tag = args.proxy + ("-s" if args.operator == "published" else "")
    tag += "-quick" if args.quick else ""
    RESULTS.mkdir(parents=True, exist_ok=True)
    jsonl = RESULTS / f"stability-{tag}.jsonl"
    rows = earlier_rows(jsonl, keep=args.resume or args.summarise_only)
    done = {(r["function"], r["seed"]) for r in rows}
    # the bar's three functions first (all seeds), then seeds outer: a run stopped early has the
    # bar's evidence and every other function at the first seeds, not a few functions at all
    first = [f for f in ("identity", "layernorm", "erf") if f in functions]
    order = [(f, s) for f in first for s in range(args.seeds)] + [
        (f, s) for s in range(args.seeds) for f in functions if f not in first
    ]
    jobs = [
        (args.proxy, f, s, args.epochs, operator_shift(f, args.operator))
        for f, s in order
        if (f, s) not in done and not args.summarise_only
    ]
    t0 = time.perf_counter()
    rows += train_rows(run_one, jobs, jsonl, workers=args.workers, desc=tag)
    rows = [r for r in rows if r["function"] in functions and r["seed"] < args.seeds]
    # the command that reproduces the rows (a --summarise-only rewrite keeps the original)
    argv = [a for a in sys.argv[1:] if a not in ("--summarise-only", "--resume")]
    cmd = "python " + " ".join(["bench/stability.py", *argv])
    head = {
        "proxy": args.proxy,
        "objective": preset.objective,
        "direction": preset.direction,
        "seeds": args.seeds,
        "workers": args.workers,
        "command": cmd,
        "finished_trials": len(rows),
        "planned_trials": len(functions) * args.seeds,
        "wall_s": time.perf_counter() - t0,
        "bar": bar_check(rows, preset.direction),
        "prescreen_agreement": prescreen_agreement(rows),
    }
    tab = table(rows, functions)
    md = markdown(tab, head, cmd)
    (RESULTS / f"stability-{tag}.md").write_text(md)
    (RESULTS / f"stability-{tag}.json").write_text(json.dumps({**head, "table": tab}, indent=1))
    print(md)
    print(json.dumps(head))


if __name__ == "__main__":
    main()
