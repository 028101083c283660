"""Is a preset discriminative? All 16 search candidates + LayerNorm + identity, several seeds.

A preset is useful only if the spread of mean results across functions is well above the seed
standard deviation. This trains every (function, seed) pair with ``train_trial`` in a pool of
one-thread worker processes, appends each result as it arrives to
``bench/results/discriminative-<proxy>.jsonl`` (so a run stopped early keeps what finished; rerun
with ``--resume`` to skip finished pairs), and writes a markdown table and a JSON summary:

- per function: mean +- std of the objective over completed seeds, diverged count, test metric;
- ``spread``: std across function means (completed functions), ``seed_std``: RMS of the
  per-function seed stds, and their ratio; ``resolvable_pairs``: the share of function pairs
  whose means differ by more than twice their combined standard error; ``anova_f`` /
  ``anova_p``: the one-way analysis of variance of the same values (is there any function effect
  at all, beyond seed noise? p is the chance of an F this large if every function were alike).

    python bench/discriminative.py --proxy vit-digits --seeds 3 --workers 2
    python bench/discriminative.py --quick     # vit-tiny, 4 functions, 2 seeds (< 30 s)

The last line printed is one JSON object (the summary).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from resumable import TEST_OF, earlier_rows, rescoring, run_arguments, train_rows

RESULTS = Path(__file__).resolve().parent / "results"
GROUPS_16 = ("natural", "transformed", "clipped unbounded", "ratio")  # science.md section 2
BASELINE_NAMES = ("layernorm", "rmsnorm", "identity")  # not search candidates


def search_16() -> list[str]:
    from normfree.search_space import catalog

    names = [c.name for c in catalog.all() if c.group in GROUPS_16]
    assert len(names) == 16, names
    return names


def add_operator_argument(ap: argparse.ArgumentParser) -> None:
    """``--operator``, shared by the runs that train the 16 with or without the scalar s (the
    value ``operator_shift`` reads)."""
    ap.add_argument(
        "--operator",
        choices=("published", "plain"),
        default="published",
        help="published: the 16 with a learnable scalar s, as the paper's search trained them "
        "(files tagged -s); plain: without s (the earlier recorded runs)",
    )


def operator_shift(name: str, operator: str) -> str:
    """The s a function trains with: the paper's search ran every candidate as
    gamma * f(alpha x + s) + beta (``published``: a scalar s); baselines take none."""
    return "scalar" if operator == "published" and name not in BASELINE_NAMES else "none"


def trial_row(
    proxy: str, name: str, seed: int, epochs: int | None, shift: str = "none"
) -> tuple[Any, dict]:
    """Train one (function, seed): its ``TrialResult``, and the row kept of it (``stability.py``
    adds its own columns to the same row). ``shift``: the operator's s (NormSpec.shift)."""
    from normfree.kernels import KernelOptions
    from normfree.settings import get_settings
    from normfree.specs import NormSpec, TrialConfig
    from normfree.workers.trainer import train_trial

    t0 = time.perf_counter()
    cfg = TrialConfig(proxy=proxy, norm=NormSpec(name=name, shift=shift), seed=seed, epochs=epochs)
    r = train_trial(cfg, kernels=KernelOptions.from_settings(get_settings()))
    return r, {
        "proxy": proxy,
        "function": name,
        "shift": shift,
        "seed": seed,
        "status": r.status,
        "objective": r.objective,
        "value": r.value,
        "test": r.metrics.get(TEST_OF.get(r.objective or "", "")),
        "metrics": r.metrics,
        "diverged_at_step": r.diverged_at_step,
        "error": r.error,
        "seconds": time.perf_counter() - t0,
    }


def run_one(job: tuple[str, str, int, int | None, str]) -> dict:
    return trial_row(*job)[1]


def reliability(rows: list[dict], functions: list[str], direction: str, metric: str | None):
    """Split-seed rank reliability (normfree.fidelity.reliability) of ``functions``' rows."""
    from normfree.fidelity.reliability import rank_reliability

    values: dict[str, dict[int, float | None]] = {}
    for r in rows:
        if r["function"] not in functions or r["status"] not in ("complete", "diverged"):
            continue
        v = _metric(r, metric) if r["status"] == "complete" else None
        if r["status"] == "complete" and v is None:
            continue
        values.setdefault(r["function"], {})[r["seed"]] = v
    return rank_reliability(values, direction=direction)  # type: ignore[arg-type]


def _metric(r: dict, metric: str | None) -> float | None:
    return r["value"] if metric is None else r["metrics"].get(metric)


def summarise(rows: list[dict], functions: list[str], metric: str | None = None) -> dict:
    """Per-function table and the spread-vs-seed-noise figures, for the objective or ``metric``."""
    by: dict[str, list[dict]] = {f: [] for f in functions}
    for r in rows:
        by.setdefault(r["function"], []).append(r)
    table = []
    for f, rs in by.items():
        vals = [
            _metric(r, metric)
            for r in rs
            if r["status"] == "complete" and _metric(r, metric) is not None
        ]
        tests = [r["test"] for r in rs if r["status"] == "complete" and r["test"] is not None]
        table.append(
            {
                "function": f,
                "runs": len(rs),
                "complete": len(vals),
                "diverged": sum(r["status"] == "diverged" for r in rs),
                "failed": sum(r["status"] == "failed" for r in rs),
                "mean": statistics.fmean(vals) if vals else None,
                "std": statistics.stdev(vals) if len(vals) > 1 else None,
                "test_mean": statistics.fmean(tests) if tests else None,
                "seconds": statistics.fmean(r["seconds"] for r in rs) if rs else None,
            }
        )
    done = [t for t in table if t["mean"] is not None and t["std"] is not None]
    means = [t["mean"] for t in done]
    spread = statistics.stdev(means) if len(means) > 1 else None
    seed_std = math.sqrt(statistics.fmean(t["std"] ** 2 for t in done)) if done else None
    anova_f = anova_p = None
    dof_within = sum(t["complete"] for t in done) - len(done)
    if len(done) > 1 and dof_within > 0 and seed_std:
        grand = sum(t["mean"] * t["complete"] for t in done) / (dof_within + len(done))
        between = sum(t["complete"] * (t["mean"] - grand) ** 2 for t in done) / (len(done) - 1)
        within = sum((t["complete"] - 1) * t["std"] ** 2 for t in done) / dof_within
        if within > 0:
            from scipy.stats import f as f_dist

            anova_f = between / within
            anova_p = float(f_dist.sf(anova_f, len(done) - 1, dof_within))
    pairs = resolvable = 0
    for i, a in enumerate(done):
        for b in done[i + 1 :]:
            pairs += 1
            se = math.sqrt(a["std"] ** 2 / a["complete"] + b["std"] ** 2 / b["complete"])
            resolvable += abs(a["mean"] - b["mean"]) > 2 * se
    return {
        "table": table,
        "functions_with_seeds": len(done),
        "spread": spread,
        "range": (max(means) - min(means)) if means else None,
        "seed_std": seed_std,
        "ratio": (spread / seed_std) if spread and seed_std else None,
        "resolvable_pairs": (resolvable / pairs) if pairs else None,
        "anova_f": anova_f,
        "anova_p": anova_p,
    }


def markdown(summary: dict, proxy: str, objective: str, direction: str, cmd: str) -> str:
    rev = direction == "maximize"
    rows = sorted(
        summary["table"],
        key=lambda t: (t["mean"] is None, -(t["mean"] or 0) if rev else (t["mean"] or 0)),
    )

    def f(v: float | None, p: int = 4) -> str:
        return "-" if v is None else f"{v:.{p}f}"

    lines = [
        f"# Discriminativeness of `{proxy}` ({objective}, {direction})",
        "",
        f"Command: `{cmd}`",
        "",
        "| function | mean | seed std | complete/runs | diverged | test | s/trial |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in rows:
        lines.append(
            f"| {t['function']} | {f(t['mean'])} | {f(t['std'])} | {t['complete']}/{t['runs']} "
            f"| {t['diverged']} | {f(t['test_mean'])} | {f(t['seconds'], 1)} |"
        )
    lines += [
        "",
        f"- spread of means across functions (std): {f(summary['spread'])}; "
        f"range {f(summary['range'])}",
        f"- seed std (RMS over functions): {f(summary['seed_std'])}",
        f"- spread / seed std: {f(summary['ratio'], 2)}",
        f"- function pairs resolved (|diff| > 2 SE): {f(summary['resolvable_pairs'], 2)}",
        f"- one-way ANOVA across functions: F = {f(summary['anova_f'], 1)}, "
        f"p = {'-' if summary['anova_p'] is None else format(summary['anova_p'], '.1e')}",
        f"- functions with >= 2 completed seeds: {summary['functions_with_seeds']}",
    ]
    return "\n".join(lines) + "\n"


def reused_rows(
    path: Path,
    proxy: str,
    functions: list[str],
    seeds: int,
    have: list[dict],
    operator: str = "plain",
) -> list[dict]:
    """Rows of a ``bench/calibration.py`` .jsonl for the same (proxy, function with this
    operator's s, seed): the same TrialConfig, so the same deterministic result; trained once,
    counted in both."""
    if not path.exists():
        return []
    done = {(r["function"], r["seed"]) for r in have}
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        c = json.loads(line)
        name, seed = c["norm"].get("name"), c["seed"]
        shift = operator_shift(str(name), operator)
        want = {"name": name} if shift == "none" else {"name": name, "shift": shift}
        if (
            c["proxy"] != proxy
            or c["norm"] != want
            or name not in functions
            or seed >= seeds
            or (name, seed) in done
            or c["config"].get("epochs") is not None
        ):
            continue
        r = c["result"]
        test_key = TEST_OF.get(r.get("objective") or "")
        value = r["metrics"].get(r["objective"]) if r["status"] == "complete" else None
        out.append(
            {
                "proxy": proxy,
                "function": name,
                "shift": shift,
                "seed": seed,
                "status": r["status"],
                "objective": r["objective"],
                "value": value,
                "test": r["metrics"].get(test_key or ""),
                "metrics": r["metrics"],
                "diverged_at_step": r.get("diverged_at_step"),
                "error": r.get("error"),
                "seconds": c["seconds"],
                "reused_from": path.name,
            }
        )
        done.add((name, seed))
    return out


def rescore(path: Path, source: str, proxy: str) -> list[dict]:
    """``source``'s rows as ``proxy``'s: the same runs ranked by a heldout objective
    (normfree.workers.rescore); marked with ``rescored_from``."""
    objective, rescored = rescoring(source, proxy)
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        m = rescored(r.get("metrics") or {})
        value = m.get(objective) if r["status"] == "complete" else None
        out.append(
            {
                **r,
                "proxy": proxy,
                "objective": objective,
                "value": value,
                "metrics": m,
                "test": None,  # the test split is part of a heldout objective
                "rescored_from": source,
            }
        )
    return out


def main() -> None:
    ap = run_arguments(__doc__, "vit-digits", 3)
    ap.add_argument("--functions", default=None, help="comma-separated (default: 16 + baselines)")
    add_operator_argument(ap)
    ap.add_argument("--quick", action="store_true", help="vit-tiny, 4 functions, 2 seeds")
    ap.add_argument(
        "--reuse", default=None, help="a calibration .jsonl whose plain-function rows to reuse"
    )
    args = ap.parse_args()
    if args.quick:
        args.proxy, args.seeds = "vit-tiny", 2
        args.functions = args.functions or "layernorm,identity,erf,tanh"
    functions = (
        args.functions.split(",")
        if args.functions
        else ["layernorm", "identity", "erf", "tanh", *search_16()[2:]]
    )
    from normfree.workers.proxies import PROXIES

    preset = PROXIES[args.proxy]
    tag = f"{args.proxy}" + ("-s" if args.operator == "published" else "")
    tag += "-quick" if args.quick else ""
    RESULTS.mkdir(parents=True, exist_ok=True)
    jsonl = RESULTS / f"discriminative-{tag}.jsonl"
    rows = earlier_rows(jsonl, keep=args.resume or args.summarise_only)
    if args.rescore_from and not rows:
        rows = rescore(
            RESULTS / f"discriminative-{args.rescore_from}.jsonl", args.rescore_from, args.proxy
        )
        jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if args.reuse:
        reused = reused_rows(
            Path(args.reuse), args.proxy, functions, args.seeds, rows, args.operator
        )
        rows += reused
        with jsonl.open("a") as fh:
            for r in reused:
                fh.write(json.dumps(r) + "\n")
    done = {(r["function"], r["seed"]) for r in rows}
    # seed-major: a run stopped early leaves every function with the same seeds
    jobs = [
        (args.proxy, f, s, args.epochs, operator_shift(f, args.operator))
        for s in range(args.seeds)
        for f in functions
        if (f, s) not in done and not args.summarise_only
    ]
    t0 = time.perf_counter()
    rows += train_rows(run_one, jobs, jsonl, workers=args.workers, desc=tag)
    summary = summarise(rows, functions)
    # the command that produced the rows (a --summarise-only rerun only rewrites the table)
    argv = [a for a in sys.argv[1:] if a != "--summarise-only"]
    cmd = "python " + " ".join(["bench/discriminative.py", *argv])
    md = markdown(summary, args.proxy, preset.objective, preset.direction, cmd)
    # The baselines can carry the spread on their own (a preset where every pointwise function
    # trails LayerNorm by the same margin separates nothing a search cares about), so the same
    # figures among the search candidates alone.
    cands = [f for f in functions if f not in BASELINE_NAMES]
    candidates_only = None
    if 1 < len(cands) < len(functions):
        c = summarise([r for r in rows if r["function"] in cands], cands)
        candidates_only = {k: c[k] for k in ("spread", "seed_std", "ratio", "resolvable_pairs")}
        ratio = "-" if c["ratio"] is None else f"{c['ratio']:.2f}"
        pairs = "-" if c["resolvable_pairs"] is None else f"{c['resolvable_pairs']:.2f}"
        md += (
            f"- among the {len(cands)} search candidates only (no LayerNorm/identity): "
            f"spread / seed std {ratio}, pairs resolved {pairs}\n"
        )
    # does the order reproduce itself? split-seed rank reliability among the candidates (the
    # baselines sit far apart and would carry it on their own), per metric
    rel = {"objective": reliability(rows, cands, preset.direction, None)}
    md += f"- among the search candidates: {rel['objective'].text()}\n"
    # the same figures for the other metrics every trial records (which one separates best?)
    others = {}
    recorded = {k for r in rows for k in r["metrics"]}
    fd_metrics = sorted(k for k in recorded if k.startswith("fd_"))  # DiT sample quality
    held = ("heldout_acc", "heldout_loss")
    for metric in ("val_loss", "test_acc", "test_loss", "eval_train_acc", *held, *fd_metrics):
        if metric != preset.objective and metric in recorded:
            o = summarise(rows, functions, metric)
            others[metric] = {k: o[k] for k in ("spread", "seed_std", "ratio", "resolvable_pairs")}
            direction = "maximize" if metric.endswith("_acc") else "minimize"
            rel[metric] = reliability(rows, cands, direction, metric)
            others[metric]["reliability"] = rel[metric].reliability
    if others:
        md += "\nOther metrics (spread / seed std, resolved pairs):\n\n"
        for metric, o in others.items():
            ratio = "-" if o["ratio"] is None else f"{o['ratio']:.2f}"
            pairs = "-" if o["resolvable_pairs"] is None else f"{o['resolvable_pairs']:.2f}"
            md += f"- {metric}: {ratio}, {pairs}; {rel[metric].text()}\n"
    if len(rows) < len(functions) * args.seeds:
        md += (
            f"\nPARTIAL: {len(rows)} of {len(functions) * args.seeds} trials finished; "
            "rerun with --resume to complete.\n"
        )
    (RESULTS / f"discriminative-{tag}.md").write_text(md)
    out = {
        "proxy": args.proxy,
        "objective": preset.objective,
        "direction": preset.direction,
        "seeds": args.seeds,
        "workers": args.workers,
        "wall_s": time.perf_counter() - t0,  # of this run (kept from the last run that trained)
        "command": cmd,
        "finished_trials": len(rows),
        "planned_trials": len(functions) * args.seeds,
        **summary,
        "candidates_only": candidates_only,
        "operator": args.operator,
        "reliability": {k: v.as_dict() for k, v in rel.items()},
        "other_metrics": others,
    }
    previous = RESULTS / f"discriminative-{tag}.json"
    if args.summarise_only and previous.exists():  # rewriting the table trains nothing
        out["wall_s"] = json.loads(previous.read_text()).get("wall_s")
    (RESULTS / f"discriminative-{tag}.json").write_text(json.dumps(out, indent=1) + "\n")
    print(md)
    print(json.dumps({k: v for k, v in out.items() if k != "table"}))


if __name__ == "__main__":
    main()
