"""``normfree leaderboard``: arms ranked over seeds, as the API ranks them, with the fidelity
line beside the ranking."""

from __future__ import annotations

from typing import Any

import click

from normfree.cli import main
from normfree.cli._output import emit, json_option
from normfree.cli._studies import board, db_option, open_store, settings_for


def _fmt(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def _arm_label(r: dict[str, Any]) -> str:
    """The arm as the API's leaderboard spells it (``storage.leaderboard.arm_text``)."""
    from normfree.storage.leaderboard import arm_text, row_options

    return arm_text(r["candidate"], options=row_options(r))


def print_leaderboard(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    if not rows:
        click.echo("(no finished trials yet)")
        return
    obj = rows[0].get("objective") or "value"
    t = Table(title=f"leaderboard: {obj} ({rows[0].get('direction')}), 95% t intervals")
    for col in ("#", "arm", "mean ± CI", "n", "div", "fail", "≈best", "vs LayerNorm (paired)"):
        t.add_column(col)
    for r in rows:
        ci = f"{_fmt(r['mean'])} ± {_fmt(r['ci_half_width'], 2)}" if r["mean"] is not None else "-"
        vs = r.get("vs_layernorm")
        vs_text = "-"
        if vs and vs.get("mean_diff") is not None:
            hw = _fmt(vs.get("ci_half_width"), 2)
            vs_text = f"{vs['mean_diff']:+.4f} ± {hw} (n={vs['n_pairs']})"
        t.add_row(
            str(r["rank"]),
            _arm_label(r),
            ci,
            str(r["n"]),
            str(r["n_diverged"]),
            str(r["n_failed"]),
            "yes" if r["indistinguishable_from_best"] else "",
            vs_text,
        )
    Console().print(t)
    click.echo("rank: by the pessimistic end of the 95% interval; ≈best: Welch p > 0.05 vs #1")


@main.command("leaderboard")
@click.option("--proxy", required=True, help="Proxy preset whose trials are ranked.")
@click.option("--study", "study_id", type=int, default=None, help="Only this study's trials.")
@click.option("--group", default=None, help="Only candidates of this catalog group.")
@click.option("--metric", default=None, help="Rank by this final metric instead.")
@db_option
@json_option
def leaderboard(
    proxy: str,
    study_id: int | None,
    group: str | None,
    metric: str | None,
    database_url: str | None,
    as_json: bool,
) -> None:
    """Arms ranked over seeds: mean ± CI, n, diverged, ≈best flag, paired diff vs LayerNorm,
    and, beside the ranking, how far it predicts published results (its fidelity)."""
    store = open_store(settings_for(database_url))
    rows = board(store, proxy, study_id=study_id, metric=metric)
    if group is not None:  # stored candidates and catalog functions alike, as the API files them
        from normfree.search_space import catalog
        from normfree.storage.leaderboard import in_group

        rows = in_group(rows, group, catalog.describe)
    fidelity = _fidelity_summary(store, proxy, study_id)
    from normfree.fidelity.caveats import board_caveats
    from normfree.storage.leaderboard import arm_text, row_options

    caveats = board_caveats(
        proxy, [{**r, "label": arm_text(r["candidate"], options=row_options(r))} for r in rows]
    )

    def human(result: dict[str, Any]) -> None:
        print_leaderboard(result["rows"])
        if result["fidelity"]:
            where = f"--study {study_id}" if study_id else f"--proxy {proxy}"
            click.echo(f"{result['fidelity']['headline']}  (normfree fidelity {where})")
        for note in result["caveats"]["notes"]:
            click.echo(f"caveat: {note}")

    emit({"proxy": proxy, "rows": rows, "fidelity": fidelity, "caveats": caveats}, as_json, human)


def _fidelity_summary(store: Any, proxy: str, study_id: int | None) -> dict[str, Any] | None:
    """The leaderboard's fidelity line (None for a proxy this process does not know)."""
    import warnings

    from normfree.fidelity.report import headline
    from normfree.workers.fidelity import FidelityError, fidelity_report

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            rep = fidelity_report(
                store.repo.db,
                proxy=None if study_id else proxy,
                study_id=study_id,
                n_boot=0,
            )
    except FidelityError:
        return None
    return {
        **rep["summary"],
        "reference": rep["reference"]["name"],
        "headline": headline(rep),
        "calibrated": rep.get("calibrated", True),
        "calibration": rep.get("calibration"),
    }
