"""``normfree leaderboard``: arms ranked over seeds, as the API ranks them, with the fidelity
line beside the ranking."""

from __future__ import annotations

from typing import Any

import click

from normfree.cli import main
from normfree.cli._output import emit, fail, json_option
from normfree.cli._studies import board, db_option, open_store, settings_for


def _fmt(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def _arm_label(r: dict[str, Any]) -> str:
    """The arm as the API's leaderboard spells it (``storage.leaderboard.arm_text``)."""
    from normfree.storage.leaderboard import arm_text, row_options

    return arm_text(r["candidate"], options=row_options(r))


def failure_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per arm with failed seeds: the most common reason and its count."""
    out = []
    for r in rows:
        f = r.get("failure")
        if f:
            out.append(
                f"{_arm_label(r)}: {f['reason']} ({f['count']} of {r['n_trials']} trials; "
                f"{f['failed']} failed in all)"
            )
    return out


def board_reliability(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The board's split-seed rank reliability with its caption (``text``), as JSON shows it."""
    from normfree.fidelity.reliability import board_reliability as measure

    rel = measure(rows)
    return {**rel.as_dict(), "text": rel.text()}


def print_leaderboard(rows: list[dict[str, Any]], wide: bool = False) -> None:
    """The ranked arms as a table fitted to the terminal's width (``shutil.get_terminal_size``;
    an arm label wraps, nothing is cut; ``wide`` prints every column at full width, for pipes and
    files); arms with no completed seed apart, unranked, with why; then the board's rank
    reliability (would its order reproduce itself on fresh seeds?)."""
    import shutil

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    if not rows:
        click.echo("(no finished trials yet)")
        return
    ranked = [r for r in rows if r.get("ranked", True)]
    unranked = [r for r in rows if not r.get("ranked", True)]
    # a table is as wide as its text needs (expand is off): a wide console cuts nothing
    width = 10_000 if wide else max(shutil.get_terminal_size((120, 24)).columns, 60)
    console = Console(width=width)
    if ranked:
        obj = ranked[0].get("objective") or "value"
        t = Table(title=f"leaderboard: {obj} ({ranked[0].get('direction')}), 95% t intervals")
        for col in ("#", "arm", "mean ± CI", "n", "div", "fail", "≈best", "vs LayerNorm (paired)"):
            # counts stay whole; the arm and the intervals wrap (fold) when the terminal is narrow
            t.add_column(
                col,
                no_wrap=col in ("#", "n", "div", "fail"),
                overflow="fold",
                min_width=12 if col == "arm" else None,
            )
        for r in ranked:
            ci = (
                f"{_fmt(r['mean'])} ± {_fmt(r['ci_half_width'], 2)}"
                if r["mean"] is not None
                else "-"
            )
            vs = r.get("vs_layernorm")
            vs_text = "-"
            if vs and vs.get("mean_diff") is not None:
                hw = _fmt(vs.get("ci_half_width"), 2)
                vs_text = f"{vs['mean_diff']:+.4f} ± {hw} (n={vs['n_pairs']})"
            t.add_row(
                str(r["rank"]),
                Text(_arm_label(r)),  # plain text: "[alpha0=1.0]" is not rich markup
                ci,
                str(r["n"]),
                str(r["n_diverged"]),
                str(r["n_failed"]),
                "yes" if r["indistinguishable_from_best"] else "",
                vs_text,
            )
        console.print(t)
        click.echo("rank: by the pessimistic end of the 95% interval; ≈best: Welch p > 0.05 vs #1")
        click.echo(board_reliability(rows)["text"])
    if unranked:
        u = Table(title="not ranked: no seed completed")
        for col in ("arm", "trials", "div", "fail", "why"):
            u.add_column(col, overflow="fold")
        for r in unranked:
            u.add_row(
                Text(_arm_label(r)),
                str(r["n_trials"]),
                str(r["n_diverged"]),
                str(r["n_failed"]),
                Text(str(r.get("unranked_reason") or "")),
            )
        console.print(u)
    partial = failure_lines([r for r in ranked if r.get("failure")])
    if partial:
        click.echo("failed seeds of ranked arms (ranked on their completed seeds):")
        for line in partial:
            click.echo(f"  {line}")


@main.command("leaderboard")
@click.option("--proxy", required=True, help="Proxy preset whose trials are ranked.")
@click.option("--study", "study_id", type=int, default=None, help="Only this study's trials.")
@click.option("--group", default=None, help="Only candidates of this catalog group.")
@click.option("--metric", default=None, help="Rank by this final metric instead.")
@click.option("--wide", is_flag=True, help="Print every column whole, whatever the terminal.")
@db_option
@json_option
def leaderboard(
    proxy: str,
    study_id: int | None,
    group: str | None,
    metric: str | None,
    wide: bool,
    database_url: str | None,
    as_json: bool,
) -> None:
    """Arms ranked over seeds: mean ± CI, n, diverged, ≈best flag, paired diff vs LayerNorm,
    and, beside the ranking, how far it predicts published results (its fidelity).

    An unknown proxy or metric exits 2 with the choices (the nearest first)."""
    store = open_store(settings_for(database_url))
    _check_choices(store, proxy, metric, as_json)
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
    reliability = board_reliability(rows)

    def human(result: dict[str, Any]) -> None:
        print_leaderboard(result["rows"], wide=wide)
        if result["fidelity"]:
            where = f"--study {study_id}" if study_id else f"--proxy {proxy}"
            click.echo(f"{result['fidelity']['headline']}  (normfree fidelity {where})")
        for note in result["caveats"]["notes"]:
            click.echo(f"caveat: {note}")

    out = {"proxy": proxy, "rows": rows, "fidelity": fidelity, "caveats": caveats}
    emit({**out, "reliability": reliability}, as_json, human)


def _check_choices(store: Any, proxy: str, metric: str | None, as_json: bool) -> None:
    """Refuse a proxy neither registered nor in the database, and a metric its trials never
    reported, naming the choices (an empty table with rc 0 read as "no results")."""
    from normfree.search_space.resolver import did_you_mean
    from normfree.storage.leaderboard import metric_names
    from normfree.workers.proxies import PROXIES

    proxies = sorted({*PROXIES, *store.repo.list_proxies()})
    if proxy not in proxies:
        fail(
            f"unknown proxy {proxy!r}{did_you_mean(proxy, proxies)}; choose from "
            f"{', '.join(proxies)}",
            as_json,
        )
    if metric is None:
        return
    metrics = metric_names(store.repo.db, proxy)
    if metrics and metric not in metrics:
        fail(
            f"unknown metric {metric!r} for {proxy}{did_you_mean(metric, metrics)}; choose from "
            f"{', '.join(metrics)}",
            as_json,
        )


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
