"""``normfree reference ...`` and ``normfree fidelity``: published results, a proxy against them.

``reference import FILE`` reads a JSON set (``{name, title, source, rows}``) or CSV rows (with
``--name`` and ``--source``); every cell is resolved through the catalog and one bad row refuses
the whole file, naming each bad row. ``fidelity --proxy P`` compares the proxy's trials (run in
its preset's own setting) with a set; ``--study ID`` compares one study instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from normfree.cli import main
from normfree.cli._output import emit, fail, json_option
from normfree.cli._studies import db_option, settings_for


def _database(database_url: str | None) -> Any:
    from normfree import storage

    return storage.open(settings_for(database_url), optuna=False).db


def _references(database_url: str | None) -> Any:
    from normfree.storage.references import ReferenceStore

    store = ReferenceStore(_database(database_url))
    store.ensure_builtin()
    return store


@main.group()
def reference() -> None:
    """Reference sets: published at-scale results that proxies are judged against."""


@reference.command("list")
@db_option
@json_option
def reference_list(database_url: str | None, as_json: bool) -> None:
    """Stored reference sets (the built-in ``published`` set first)."""
    rows = _references(database_url).list()

    def human(items: list[dict[str, Any]]) -> None:
        for r in items:
            tag = " (built in)" if r["builtin"] else ""
            click.echo(f"{r['name']}{tag}: {r['n_rows']} rows, {len(r['settings'])} settings")
            click.echo(f"  {r['title'] or ''}  [{r['source'][:100]}]")

    emit(rows, as_json, human)


@reference.command("show")
@click.argument("name")
@click.option("--csv", "as_csv", is_flag=True, help="Print the rows in the import format.")
@db_option
@json_option
def reference_show(name: str, as_csv: bool, database_url: str | None, as_json: bool) -> None:
    """One set's rows: setting, cell, value (or failed to train)."""
    store = _references(database_url)
    if as_csv:
        from normfree.fidelity.reference import to_csv

        ref = store.get(name)
        if ref is None:
            fail(f"no reference set {name!r}; see `normfree reference list`", as_json)
        click.echo(to_csv(ref), nl=False)
        return
    found = store.describe(name)
    if found is None:
        fail(f"no reference set {name!r}; see `normfree reference list`", as_json)

    def human(r: dict[str, Any]) -> None:
        click.echo(f"{r['name']}: {r['title']}\nsource: {r['source']}")
        setting = None
        for row in r["rows"]:
            if row["setting"] != setting:
                setting = row["setting"]
                click.echo(
                    f"\n{setting}  ({row['family']}, {row['metric']}, {row['direction']}, "
                    f"resolution {row['resolution']:g})"
                )
            if row["failed"]:
                value = "failed to train"
            elif row["value_low"] == row["value_high"]:
                value = f"{row['value']:g}"
            else:
                value = f"{row['value_low']:g} to {row['value_high']:g}"
            click.echo(f"  {row['cell_label']:<34} {value:<18} {row['note']}")

    emit(found, as_json, human)


@reference.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", default=None, help="CSV: the set's name (JSON files carry their own).")
@click.option("--source", default=None, help="CSV: the citation.")
@click.option("--title", default="", help="CSV: a title.")
@click.option("--replace", is_flag=True, help="Overwrite a stored set of the same name.")
@db_option
@json_option
def reference_import(
    file: Path,
    name: str | None,
    source: str | None,
    title: str,
    replace: bool,
    database_url: str | None,
    as_json: bool,
) -> None:
    """Import a reference set from FILE (.json or .csv); nothing is stored if a row is bad."""
    import json

    from normfree.fidelity.reference import ReferenceError, build_set, from_csv
    from normfree.storage.references import ReferenceExists

    text = file.read_text(encoding="utf-8")
    try:
        if file.suffix.lower() == ".json":
            ref = build_set(json.loads(text))
        else:
            if not name or not source:
                fail("a CSV import needs --name and --source (the citation)", as_json)
            ref = from_csv(text, name=name, source=source, title=title)
    except json.JSONDecodeError as exc:
        fail(f"{file}: not JSON: {exc.msg} (line {exc.lineno})", as_json)
    except ReferenceError as exc:
        fail(f"{file}: reference set refused: {exc}", as_json)
    try:
        out = _references(database_url).put(ref, replace=replace, submitter="cli")
    except ReferenceExists as exc:
        fail(f"{exc} (add --replace)", as_json, code=1)
    emit(
        out,
        as_json,
        lambda r: click.echo(
            f"stored reference set {r['name']}: {r['n_rows']} rows in {len(r['settings'])} settings"
        ),
    )


@reference.command("delete")
@click.argument("name")
@db_option
@json_option
def reference_delete(name: str, database_url: str | None, as_json: bool) -> None:
    """Delete a user's reference set (the built-in set stays)."""
    try:
        gone = _references(database_url).delete(name)
    except ValueError as exc:
        fail(str(exc), as_json)
    if not gone:
        fail(f"no reference set {name!r}", as_json, code=1)
    emit({"deleted": name}, as_json, lambda r: click.echo(f"deleted {r['deleted']}"))


# ------------------------------------------------------------------------------- fidelity
def print_report(rep: dict[str, Any]) -> None:
    """The fidelity report for people: one block per setting, then the summary line."""
    from normfree.fidelity.report import headline

    subj = rep["subject"]
    what = f"study {subj['study_id']}" if subj.get("study_id") else f"proxy {subj.get('proxy')}"
    click.echo(
        f"fidelity of {what} to {rep['reference']['name']} ({rep['family']}): "
        f"{subj.get('trials', 0)} trials in {subj.get('arms', 0)} arms"
    )
    for s in rep["settings"]:
        ci = s["spearman_ci"]
        ci_text = f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci[0] is not None else ""
        rho = "-" if s["spearman"] is None else f"{s['spearman']:+.2f}{ci_text}"
        click.echo(
            f"\n{s['setting']}  vs proxy {s['proxy_metric']}: Spearman {rho}, "
            f"orders {s['pairs_agree']}/{s['pairs_resolvable']}"
        )
        if s.get("proxy_metric_reason"):
            click.echo(f"  compared with {s['proxy_metric']}: {s['proxy_metric_reason']}")
        for o in s.get("others") or []:
            o_rho = "-" if o["spearman"] is None else f"{o['spearman']:+.2f}"
            click.echo(
                f"  beside it, {o['proxy_metric']}: Spearman {o_rho}, "
                f"orders {o['pairs_agree']}/{o['pairs_resolvable']}"
            )
        for c in s["cells"]:
            ref = c["reference"]
            p = c["proxy"]
            ref_text = "failed" if ref["failed"] else f"{ref['value']:g}"
            if p["failed"]:
                prox = f"failed ({p['n_failed']}/{p['n_failed'] + p['n']} seeds)"
            elif p["mean"] is None:
                prox = "-"
            else:
                hw = "" if p["ci_high"] is None else f" ± {p['ci_high'] - p['mean']:.3g}"
                prox = f"{p['mean']:.4g}{hw} (n={p['n']})"
            click.echo(f"  {c['cell']:<32} ref {ref_text:<10} proxy {prox}")
        for pair in s["pairs"]:
            if not pair["agree"]:
                click.echo(f"  reversed or tied: {pair['better']} > {pair['worse']}")
    if rep["not_compared"]:
        click.echo(f"\nnot compared (no trials): {'; '.join(rep['not_compared'])}")
    click.echo("\n" + headline(rep))
    if rep.get("reliability"):
        click.echo(rep["reliability"]["text"])


@main.command("fidelity")
@click.option("--proxy", default=None, help="Proxy preset (its trials in the preset's setting).")
@click.option("--study", "study_id", type=int, default=None, help="One study instead.")
@click.option("--reference", "reference_name", default="published", show_default=True)
@click.option("--boot", type=int, default=1000, show_default=True, help="Bootstrap resamples.")
@db_option
@json_option
def fidelity(
    proxy: str | None,
    study_id: int | None,
    reference_name: str,
    boot: int,
    database_url: str | None,
    as_json: bool,
) -> None:
    """How far a proxy's ranking predicts published results: rank correlation, orders, failures."""
    import warnings

    from normfree.fidelity.report import headline
    from normfree.workers.fidelity import FidelityError, fidelity_report

    if (proxy is None) == (study_id is None):
        fail("give --proxy or --study", as_json)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            rep = fidelity_report(
                _database(database_url),
                proxy=proxy,
                study_id=study_id,
                reference=reference_name,
                n_boot=max(0, boot),
            )
    except FidelityError as exc:
        fail(str(exc), as_json)
    emit({**rep, "headline": headline(rep)}, as_json, print_report)
