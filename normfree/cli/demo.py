"""``normfree demo``: the main job on the embedded default (``make demo``).

Two steps: build and evaluate the whole catalog (parse, exact derivative, properties, torch
evaluation in float32 vs float64; :func:`catalog_demo`), then run a small real property study end
to end on SQLite and a local Ray (:func:`demo_study`: erf shifted by -2, 0
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
from normfree.cli._studies import (
    board,
    counts_line,
    db_option,
    open_store,
    run_driver,
    settings_for,
)
from normfree.cli.leaderboard import board_reliability, print_leaderboard


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
@db_option
@json_option
def demo(catalog_only: bool, quick: bool, database_url: str | None, as_json: bool) -> None:
    """Evaluate the catalog, then run a small real property study and print its leaderboard."""
    result = catalog_demo(progress=not as_json)
    if catalog_only:
        emit(result, as_json, _human)
        return
    if not as_json:
        _human(result)
    # --quick: the smoke-test proxy, one epoch (seconds, for CI); it is not calibrated
    overrides = {"proxy": "vit-tiny", "epochs": 1, "seeds": 3, "values": [-1.0, 0.0, 1.0],
                 "functions": ["erf", "tanh"]} if quick else {}  # fmt: skip
    result["study"] = demo_study(database_url, as_json=as_json, **overrides)
    emit(result, as_json, lambda r: print_demo_study(r["study"]))


# ------------------------------------------------------------------------------ the demo study

# The demo study: does zero-centredness matter? erf shifted horizontally by -2, 0 and +2 beside
# LayerNorm, two paired seeds, on the calibrated default ViT screen at its own budget. The Derf
# paper (section 3) reports that shifts of +-2 fail to train; the demo prints how this study
# agrees with that (its fidelity to the built-in reference set). 8 trials: about four minutes on
# two idle cores (a diverging trial stops early).
DEMO_STUDY: dict[str, Any] = {
    "kind": "property",
    "name": "demo: zero-centredness (horizontal shift)",
    "proxy": "vit-screen-heldout",
    "seeds": 2,
    "functions": ["erf"],
    "transform": "shift_h",
    "values": [-2.0, 0.0, 2.0],
    "baselines": ["layernorm"],
}


def demo_study(
    database_url: str | None = None, *, as_json: bool = False, **overrides: Any
) -> dict[str, Any]:
    """Create and run the demo property study on the embedded default; return its results.

    ``overrides`` replace fields of :data:`DEMO_STUDY` (tests use a tiny proxy).
    """
    from normfree.specs import StudySpec
    from normfree.workers.driver import create_study

    settings = settings_for(database_url)
    spec = StudySpec(**{**DEMO_STUDY, **overrides})
    study_id = create_study(spec, settings=settings)
    store = open_store(settings)
    if not as_json:
        n = store.repo.study_progress(study_id)["total"]
        click.echo(
            f"\nstudy {study_id}: {spec.transform} of {', '.join(spec.functions)} over "
            f"{spec.values} + {', '.join(spec.baselines)}, {spec.seeds} seeds on {spec.proxy} "
            f"({n} trials, local Ray)"
        )
    run = run_driver(study_id, settings, as_json, None)
    rows = board(store, spec.proxy, study_id=study_id)
    return {
        "study_id": study_id,
        "proxy": spec.proxy,
        "run": run,
        "leaderboard": rows,
        "reliability": board_reliability(rows),
        "fidelity": _study_fidelity(store, study_id),
        "caveats": _caveats(spec.proxy, rows),
        "database": store.url,
        "optuna_storage": store.optuna_url,
    }


def _caveats(proxy: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What the demo's board says beside its ranking (two seeds: provisional)."""
    from normfree.fidelity.caveats import board_caveats
    from normfree.storage.leaderboard import arm_text, row_options

    return board_caveats(
        proxy, [{**r, "label": arm_text(r["candidate"], options=row_options(r))} for r in rows]
    )


def _study_fidelity(store: Any, study_id: int) -> dict[str, Any]:
    """The study's fidelity to the built-in published results (the report, plus its headline)."""
    import warnings

    from normfree.fidelity.report import headline
    from normfree.workers.fidelity import fidelity_report

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rep = fidelity_report(store.repo.db, study_id=study_id, n_boot=200)
    return {**rep, "headline": headline(rep)}


def _where(url: str) -> str:
    """A database URL for people: an SQLite file as its absolute path."""
    from pathlib import Path

    prefix = "sqlite:///"
    if url.startswith(prefix) and url[len(prefix) :] not in ("", ":memory:"):
        return str(Path(url[len(prefix) :]).resolve())
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def print_demo_study(result: dict[str, Any]) -> None:
    """The demo study's human summary: leaderboard, and where its results live."""
    r = result["run"]
    click.echo(
        f"study {result['study_id']}: {r['status']} in {r['wall_s']} s ({counts_line(r['counts'])})"
    )
    print_leaderboard(result["leaderboard"])
    for note in (result.get("caveats") or {}).get("notes", []):
        click.echo(f"caveat: {note}")
    fid = result.get("fidelity")
    if fid:
        click.echo("\nAgainst the published results (science.md section 7):")
        for s in fid["settings"]:
            for c in s["cells"]:
                ref, prox = c["reference"], c["proxy"]
                ref_text = "failed to train" if ref["failed"] else f"{ref['value']:g}"
                if prox["failed"]:
                    prox_text = (
                        f"failed to train ({prox['n_failed']} of {len(prox['seeds'])} seeds)"
                    )
                else:
                    prox_text = "-" if prox["mean"] is None else f"{prox['mean']:.4f}"
                click.echo(
                    f"  [{s['setting']}] {c['cell']}: published {ref_text}, here {prox_text}"
                )
        click.echo(fid["headline"])
    click.echo(
        f"results: {_where(result['database'])}  (Optuna: {_where(result['optuna_storage'])})"
    )
    click.echo(
        f"see also: normfree study status {result['study_id']}  |  "
        f"normfree fidelity --study {result['study_id']}  |  normfree serve"
    )
