"""``normfree demo``: the main job on the embedded default (``make demo``).

Two steps: build and evaluate the whole catalog (parse, exact derivative, properties, torch
evaluation in float32 vs float64; :func:`catalog_demo`), then run a small real property study end
to end on SQLite and a local Ray (:func:`normfree.cli.study.demo_study`: erf shifted by -2, 0
and +2 beside LayerNorm, two paired seeds, on the calibrated vit-screen) and print its
leaderboard, how it agrees with the published results, and where the results are.
``--catalog-only`` stops after the first step; ``--quick`` runs the study on the tiny smoke-test
proxy instead (seconds, for CI; that proxy is not calibrated).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from normfree.cli import main
from normfree.cli._output import emit, json_option


def catalog_demo(progress: bool = True) -> dict[str, Any]:
    """Evaluate every catalog candidate; returns JSON-ready rows (plus the baselines)."""
    import torch
    from tqdm import tqdm

    from normfree.search_space import catalog, evaluate

    # The same points in both precisions (float32-representable), so that a point next to a
    # clip corner is on the same side of it in both.
    u32 = torch.linspace(-5.0, 5.0, 1001, dtype=torch.float32)
    u64 = u32.to(torch.float64)
    rows = []
    for c in tqdm(catalog.all(), desc="catalog", unit="fn", file=sys.stderr, disable=not progress):
        f64, d64 = evaluate(c, u64), evaluate(c, u64, derivative=True)
        f32, d32 = evaluate(c, u32), evaluate(c, u32, derivative=True)
        p = c.properties
        rows.append(
            {
                "name": c.name,
                "group": c.group,
                "formula": c.formula,
                "f(1)": float(evaluate(c, torch.tensor([1.0], dtype=torch.float64))[0]),
                "f'(0)": p.slope0,
                "bounded": p.bounded,
                "monotone": p.monotone,
                "summary": p.summary(),
                # float32 vs float64 agreement of f and f' over [-5, 5] (a kernel sanity check)
                "max_err_f32": float((f32.double() - f64).abs().max()),
                "max_err_df32": float(((d32.double() - d64).abs() / (1 + d64.abs())).max()),
                "finite": bool(torch.isfinite(f32).all() and torch.isfinite(d32).all()),
            }
        )
    return {"candidates": rows, "baselines": [b.name for b in catalog.baselines()]}


def _human(result: dict[str, Any]) -> None:
    from normfree.cli.candidates import render_table

    table = [
        {
            "name": r["name"],
            "group": r["group"],
            "f(1)": f"{r['f(1)']:.4f}",
            "f'(0)": format(r["f'(0)"], ".4g"),
            "f32 err": f"{r['max_err_f32']:.1e}",
            "properties": r["summary"],
        }
        for r in result["candidates"]
    ]
    click.echo(render_table(table))
    click.echo(f"\n{len(table)} candidates evaluated; baselines: {', '.join(result['baselines'])}")


@main.command()
@click.option("--catalog-only", is_flag=True, help="Only evaluate the catalog; train nothing.")
@click.option("--quick", is_flag=True, help="Run the study on the tiny smoke-test proxy (seconds).")
@click.option(
    "--db",
    "database_url",
    default=None,
    metavar="URL",
    help="Database URL (default: NORMFREE_DATABASE_URL, else sqlite:///normfree.db).",
)
@json_option
def demo(catalog_only: bool, quick: bool, database_url: str | None, as_json: bool) -> None:
    """Evaluate the catalog, then run a small real property study and print its leaderboard."""
    result = catalog_demo(progress=not as_json)
    if catalog_only:
        emit(result, as_json, _human)
        return
    if not as_json:
        _human(result)
    from normfree.cli.study import demo_study, print_demo_study

    # --quick: the smoke-test proxy, one epoch (seconds, for CI); it is not calibrated
    overrides = {"proxy": "vit-tiny", "epochs": 1, "seeds": 3, "values": [-1.0, 0.0, 1.0],
                 "functions": ["erf", "tanh"]} if quick else {}  # fmt: skip
    result["study"] = demo_study(database_url, as_json=as_json, **overrides)
    emit(result, as_json, lambda r: print_demo_study(r["study"]))
