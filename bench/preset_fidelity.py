"""Fidelity of every preset with recorded trials: the README's per-preset table.

A preset is worth what its ranking predicts about training at scale. The calibration runs
(``bench/calibration.py``) measure that for the default screens; this script asks the same
questions of every preset that already has trials recorded in ``bench/results/``: the
calibration, discriminativeness (``bench/discriminative.py``) and stability
(``bench/stability.py``) runs. Their rows are reduced to the fidelity layer's
:class:`~normfree.fidelity.report.ProxyTrial` (the function a row trained, its seed, whether it
failed to train, its objective, its eval-mode train loss and FD where measured), pooled per
preset (a (cell, seed) pair trained by two runs counts once, the calibration row first), and
judged by the same code ``normfree fidelity`` and the calibration table run: the built-in
published set's report and the science.md section 7 facts.

Nothing is trained: it reads what the other benchmarks wrote, so ``--quick`` is the same run.

    python bench/preset_fidelity.py          # writes bench/results/preset-fidelity.{md,json}

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
# calibration rows first: they carry the full NormSpec (shift, fixed alpha) and the train loss
SOURCES = ("calibration-*.jsonl", "discriminative-*.jsonl", "stability-*.jsonl")


def _trial(row: dict[str, Any]) -> tuple[str, Any] | None:
    """(proxy, ProxyTrial) of one benchmark row, or None when its function is not resolvable."""
    from normfree.fidelity.reference import norm_cell_key
    from normfree.fidelity.report import ProxyTrial, fd_score
    from normfree.specs import NormSpec
    from normfree.storage.references import arm_label
    from normfree.workers.proxies import PROXIES

    proxy = row["proxy"]
    if proxy not in PROXIES:
        return None
    if "result" in row:  # bench/calibration.py: the stored TrialResult
        norm = row["config"]["norm"]
        res = row["result"]
        status = res["status"]
        value = (res.get("metrics") or {}).get(res.get("objective") or "")
        etl, metrics = res.get("eval_train_loss"), res.get("metrics") or {}
    else:  # discriminative / stability rows: a plain function name
        shift = row.get("shift", "none")  # rows of the published operator carry s
        norm = NormSpec(name=row["function"], shift=shift).model_dump(mode="json")
        status, value = row["status"], row.get("value")
        etl, metrics = None, row.get("metrics") or {}
    if status not in ("complete", "diverged"):
        return None  # pruned or errored trials say nothing about the function
    cell = norm_cell_key(norm)
    if cell is None:
        return None
    preset = PROXIES[proxy]
    return proxy, ProxyTrial(
        cell=cell,
        label=arm_label(norm),
        seed=int(row["seed"]),
        failed=status == "diverged",
        objective=None if status == "diverged" else value,
        objective_direction=preset.direction,
        eval_train_loss=etl,
        fd=fd_score(metrics),
    )


def collect(results: Path = RESULTS) -> dict[str, dict[str, Any]]:
    """Per proxy: its trials (one per (cell, seed)) and the files they came from."""
    out: dict[str, dict[str, Any]] = {}
    for pattern in SOURCES:
        for path in sorted(results.glob(pattern)):
            if "-quick" in path.name:
                continue  # smoke runs of the tiny presets: not evidence
            for line in path.read_text().splitlines():
                if not line.strip():
                    continue
                got = _trial(json.loads(line))
                if got is None:
                    continue
                proxy, trial = got
                entry = out.setdefault(proxy, {"trials": {}, "files": []})
                if path.name not in entry["files"]:
                    entry["files"].append(path.name)
                entry["trials"].setdefault((trial.cell, trial.seed), trial)
    return out


def summarise(proxy: str, trials: list[Any]) -> dict[str, Any]:
    from normfree.fidelity.facts import evaluate_all
    from normfree.fidelity.published import published
    from normfree.fidelity.report import build_report, headline
    from normfree.workers.proxies import PROXIES

    family = PROXIES[proxy].family
    report = build_report(published(), trials, family=family, subject={"proxy": proxy})
    facts = evaluate_all(family, trials)
    measured = [f for f in facts if f["passed"] is not None]
    return {
        "proxy": proxy,
        "family": family,
        "trials": len(trials),
        "summary": report["summary"],
        "headline": headline(report),
        "facts_passed": sum(bool(f["passed"]) for f in measured),
        "facts_measured": len(measured),
        "facts_failed": [f["claim"] for f in measured if not f["passed"]],
        "facts_not_measured": [f["claim"] for f in facts if f["passed"] is None],
    }


def markdown(rows: list[dict[str, Any]], sources: dict[str, list[str]]) -> str:
    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.0%}"

    lines = [
        "# Fidelity of every preset with recorded trials",
        "",
        "Command: `python bench/preset_fidelity.py` (reads the calibration, discriminativeness "
        "and stability runs in bench/results/; trains nothing). Judged against the built-in "
        "set `published` (science.md section 7) by the code `normfree fidelity` runs.",
        "",
        "| preset | trials | cells shared | published orders reproduced | mean Spearman | "
        "failures agree | section 7 facts held | facts that fail |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r["summary"]
        orders = (
            f"{s['pairs_agree']}/{s['pairs_resolvable']} ({pct(s['pair_agreement'])})"
            if s["pairs_resolvable"]
            else "-"
        )
        rho = "-" if s["spearman_mean"] is None else f"{s['spearman_mean']:+.2f}"
        lines.append(
            f"| `{r['proxy']}` | {r['trials']} | {s['cells']} | {orders} | {rho} | "
            f"{pct(s['failure_agreement'])} | {r['facts_passed']}/{r['facts_measured']} | "
            f"{'; '.join(r['facts_failed']) or '-'} |"
        )
    lines += ["", "Sources per preset:", ""]
    lines += [f"- `{p}`: {', '.join(f)}" for p, f in sorted(sources.items())]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the same run (nothing is trained)")
    ap.parse_args()
    import warnings

    warnings.simplefilter("ignore", RuntimeWarning)  # constant cells make rank ties
    pooled = collect()
    rows = [
        summarise(proxy, list(entry["trials"].values())) for proxy, entry in sorted(pooled.items())
    ]
    rows.sort(key=lambda r: (r["family"], r["proxy"]))
    md = markdown(rows, {p: e["files"] for p, e in pooled.items()})
    (RESULTS / "preset-fidelity.md").write_text(md)
    (RESULTS / "preset-fidelity.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(md, file=sys.stderr)
    print(
        json.dumps(
            {
                "bench": "preset_fidelity",
                "presets": {
                    r["proxy"]: {
                        "orders": r["summary"]["pair_agreement"],
                        "spearman": r["summary"]["spearman_mean"],
                        "failures": r["summary"]["failure_agreement"],
                        "facts": f"{r['facts_passed']}/{r['facts_measured']}",
                    }
                    for r in rows
                },
            }
        )
    )


if __name__ == "__main__":
    main()
