"""The human form of a generate study's report (``normfree study run/generate``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def print_report(report: Mapping[str, Any]) -> None:
    """The human form of :func:`study_report` (CLI): generations table, importance ranking."""
    from rich.console import Console
    from rich.table import Table

    cols = ("invalid", "duplicate", "constraint", "prescreen", "ranked_out", "train", "seed")
    t = Table(title="generations: proposals and where they stopped")
    for c in ("gen", "proposed", *cols):
        t.add_column(c)
    for g in report["generations"]:
        t.add_row(
            str(g["generation"]),
            str(g["proposed"]),
            *(str(g["counts"].get(c, 0)) for c in cols),
        )
    console = Console()
    console.print(t)
    frac = report.get("fraction_rejected")
    if frac is not None:
        saved = report.get("trial_s_avoided")
        extra = f", ~{saved:.0f} trial-seconds avoided" if saved else ""
        console.print(f"rejected before training: {100 * frac:.0f}% of proposals{extra}")
    imp = report.get("importance") or {}
    rows = [f for f in imp.get("features", []) if not f.get("constant")]
    if rows:
        t = Table(title=f"property importance ({imp['method']}, n={imp['n_candidates']})")
        for c in ("property", "rho", "95% CI"):
            t.add_column(c)
        for f in rows:
            ci = f"[{f['ci_low']:+.2f}, {f['ci_high']:+.2f}]" if f["ci_low"] is not None else "-"
            t.add_row(f["name"], f"{f['rho']:+.2f}", ci)
        console.print(t)
    elif imp.get("note"):
        console.print(f"property importance: {imp['note']}")
