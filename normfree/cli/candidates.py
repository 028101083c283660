"""``normfree candidates list|show|check``: the catalog and user formulas, with their properties.

``check`` is the dry run of a submission: parse, canonical form, fingerprint, properties and the
catalog entry it duplicates, if any. A rejected formula exits with status 2 and the reason (and,
with ``--json``, ``{"error", "position"}``). A formula not checked before is analysed by the
checker process (started on first use, see :mod:`normfree.search_space.checker`); ``candidates
checker status|stop`` shows and stops it.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import click

from normfree.cli import main
from normfree.cli._output import emit, fail, json_option
from normfree.cli._studies import db_option


def _row(d: dict[str, Any]) -> dict[str, str]:
    """The columns of the people table for one candidate (its ``to_dict()``)."""
    p = SimpleNamespace(**d["properties"])
    growth = "bounded" if p.bounded else p.growth
    if p.growth_exponent is not None and not p.bounded and p.growth != "linear":
        growth += f" {p.growth_exponent:g}"
    return {
        "name": d["name"],
        "group": d["group"],
        "f(0)=0": "yes" if p.zero_centred else f"{p.f0:.3g}",
        "odd": "yes" if p.odd else "no",
        "growth": growth,
        "range": "(-inf, inf)"
        if p.range_min is None and p.range_max is None
        else f"[{_num(p.range_min)}, {_num(p.range_max)}]",
        "f'(0)": f"{p.slope0:.4g}",
        "flat": f"±{p.flat_halfwidth:g}" if p.flat_halfwidth > 0 else "-",
        "monotone": p.monotone,
        "smooth": "yes"
        if p.differentiable
        else (
            "kinks "
            + ",".join(f"{x:.3g}" for x in p.non_differentiable_at)
            + (" (heavy-tailed slope)" if p.heavy_tailed_slope else "")
        )
        if p.continuous
        else "jumps",
        "formula": d["formula"],
    }


def _num(v: float | None) -> str:
    return "inf" if v is None else f"{v:.4g}"


def render_table(rows: list[dict[str, str]]) -> str:
    """A plain fixed-width table (readable in any terminal, stable in tests)."""
    if not rows:
        return "(no rows)"
    cols = list(rows[0])
    widths = {k: max(len(k), *(len(r.get(k, "")) for r in rows)) for k in cols}
    line = "  ".join(k.ljust(widths[k]) for k in cols)
    out = [line, "  ".join("-" * widths[k] for k in cols)]
    out += ["  ".join(r.get(k, "").ljust(widths[k]) for k in cols).rstrip() for r in rows]
    return "\n".join(out)


@main.group()
def candidates() -> None:
    """The catalog of pointwise functions, and checks of your own formulas."""


@candidates.command("list")
@click.option("--group", default=None, help="Only this group (natural, ratio, growth, ...).")
@click.option(
    "--stored",
    is_flag=True,
    help="Also the candidates stored in the database (submitted over REST; implied by --db).",
)
@click.option("--archived", is_flag=True, help="Stored candidates: archived ones too.")
@db_option
@json_option
def list_cmd(
    group: str | None, stored: bool, archived: bool, database_url: str | None, as_json: bool
) -> None:
    """A table of every catalog candidate with its properties, then the baselines; with
    --stored (or --db), then the candidates stored in the database, which studies name as they
    name the catalog's. Without them the command reads no settings and opens no database (it
    answers from the catalog's index in a fraction of a second)."""
    from normfree.search_space import catalog_index
    from normfree.search_space.baselines import BASELINES

    rows = [e.data for e in catalog_index.entries() if group is None or e.group == group]
    found: list[dict[str, Any]] = []
    unread = None  # why the stored candidates were not read, when they were asked for
    if stored or database_url or archived:
        from normfree.cli._studies import NoDatabase, stored_repo

        try:
            found = stored_repo(database_url).list_candidates(group=group, archived=archived)
        except NoDatabase as exc:  # said beside the catalog, which still answers
            unread = str(exc)
    if not rows and not found and group is not None:
        fail(f"no candidates in group {group!r}", as_json)
    result = {
        "candidates": rows,
        "baselines": [b.to_dict() for b in BASELINES] if group is None else [],
        "stored": [_stored_record(r) for r in found],
        **({"stored_not_read": unread} if unread else {}),
    }

    def human(_: Any) -> None:
        if rows:
            click.echo(render_table([_row(d) for d in rows]))
        if result["baselines"]:
            click.echo(
                "\nbaselines (reference modules, not formulas): "
                + ", ".join(b["name"] for b in result["baselines"])
            )
        if unread:
            click.echo(f"\nstored candidates not read: {unread}")
        if result["stored"]:
            click.echo("\nstored in the database:")
            click.echo(
                render_table(
                    [
                        {k: str(d[k]) for k in ("name", "formula", "canonical", "submitter")}
                        | {"archived": "yes" if d["archived"] else ""}
                        for d in result["stored"]
                    ]
                )
            )

    emit(result, as_json, human)


def _stored_record(row: dict[str, Any]) -> dict[str, Any]:
    """What ``candidates list`` shows of a stored candidate (the row's other fields are
    internal); a row stored by an older version may lack properties: shown as stored."""
    created = row.get("created_at")
    return {
        "name": row["name"],
        "group": row.get("group"),
        "formula": row.get("formula"),
        "canonical": row.get("canonical"),
        "fingerprint": row.get("fingerprint"),
        "properties": row.get("properties") or {},
        "submitter": row.get("submitter"),
        "created_at": None if created is None else str(created),
        "archived": row.get("archived_at") is not None,
    }


def _details(d: dict[str, Any], call: str, summary: str) -> None:
    for key in ("name", "group", "formula", "expr", "derivative", "canonical", "fingerprint"):
        click.echo(f"{key:12s} {d[key]}")
    click.echo(f"{'lineage':12s} {call}")
    if d.get("citation"):
        click.echo(f"{'citation':12s} {d['citation']}")
    click.echo(f"{'properties':12s} {summary}")
    for k, v in d["properties"].items():
        click.echo(f"  {k:22s} {v}")


def _candidate_details(c: Any) -> None:
    _details(c.to_dict(), c.lineage.call, c.properties.summary())


# A formula may start with a minus ("-erf(u)"): unknown "options" are taken as the argument, so
# it needs no "--" (the command's real options, --json and --name, still work).
_FORMULA_ARGS = {"ignore_unknown_options": True}


@candidates.command("show", context_settings=_FORMULA_ARGS)
@click.argument("name")
@db_option
@json_option
def show_cmd(name: str, database_url: str | None, as_json: bool) -> None:
    """One candidate: a catalog name, a baseline, a candidate stored in the database (submitted
    over REST or by a study), a formula, or a transform call like 'shift_h(erf, 0.5)'."""
    from normfree.search_space import catalog_index
    from normfree.search_space.baselines import BASELINES

    baseline = next((b.to_dict() for b in BASELINES if b.name == name), None)
    if baseline is not None:
        emit(
            baseline,
            as_json,
            lambda d: click.echo("\n".join(f"{k:12s} {v}" for k, v in d.items())),
        )
        return
    entry = catalog_index.get(name)
    if entry is not None:  # a catalog name: from the index, no sympy
        emit(entry.data, as_json, lambda d: _details(d, entry.call, entry.summary))
        return
    from normfree.search_space import ExpressionError, catalog

    try:
        c = catalog.resolve(name)
    except ExpressionError as exc:
        c = _stored_candidate(name, database_url, exc, as_json)
    emit(c.to_dict(), as_json, lambda _: _candidate_details(c))


def _stored_candidate(name: str, database_url: str | None, first: Any, as_json: bool) -> Any:
    """``name`` resolved with the database's stored candidates (nested in transforms too), as
    ``train --norm`` and a study resolve it; the catalog's error when the database does not
    know it either, or when there is no database to ask."""
    from normfree.cli._studies import NoDatabase, bake_stored
    from normfree.search_space import ExpressionError

    try:
        return bake_stored(name, database_url)[0]
    except ExpressionError as exc:
        fail(f"unknown candidate {name!r}: {exc}", as_json, position=exc.position)
    except NoDatabase as exc:  # the catalog's answer stands
        fail(
            f"unknown candidate {name!r}: {first} (stored candidates not searched: {exc})",
            as_json,
            position=first.position,
        )


@candidates.command("check", context_settings=_FORMULA_ARGS)
@click.argument("formula")
@click.option("--name", default=None, help="Name for the candidate (default: the formula).")
@json_option
def check_cmd(formula: str, name: str | None, as_json: bool) -> None:
    """Parse FORMULA (in u), print its canonical form, properties and duplicate, if any."""
    from normfree.search_space import ExpressionError, checker

    try:
        checked = checker.check(formula, name=name)
    except ExpressionError as exc:
        fail(f"formula rejected: {exc}", as_json, position=exc.position, reason=exc.message)

    def human(d: dict[str, Any]) -> None:
        _details(d, checked.call, checked.summary)
        click.echo(f"{'duplicate of':12s} {d['duplicate_of'] or '-'}")

    emit(checked.data, as_json, human)


@candidates.group("checker")
def checker_group() -> None:
    """The local process that answers first checks (it keeps sympy loaded; see README)."""


@checker_group.command("status")
@json_option
def checker_status_cmd(as_json: bool) -> None:
    """The checkers running for this cache folder (one per code version), and silent sockets."""
    from normfree.search_space import checker

    def human(d: dict[str, Any]) -> None:
        for c in d["running"]:
            click.echo(
                f"checker {c['key']}: pid {c['pid']}, {c['served']} checks served, "
                f"{'warm' if c['warm'] else 'warming up'}, {c['cpu_s']:.2f} s CPU"
            )
        for key in d["silent"]:
            click.echo(f"checker {key}: no answer (stale socket, or busy)")
        if not d["running"] and not d["silent"]:
            click.echo(f"no checker running for {d['cache_dir']}")

    emit(checker.status_all(), as_json, human)


@checker_group.command("stop")
@json_option
def checker_stop_cmd(as_json: bool) -> None:
    """Stop every checker of this cache folder (any code version); remove stale sockets."""
    from normfree.search_space import checker

    def human(d: dict[str, Any]) -> None:
        for c in d["stopped"]:
            click.echo(f"stopped checker {c['key']} (pid {c['pid']})")
        for key in d["stale_removed"]:
            click.echo(f"removed the stale socket of checker {key}")
        for key in d["busy"]:
            click.echo(f"checker {key} is busy and did not stop; try again")
        if not any(d.values()):
            click.echo("no checker running")

    emit(checker.stop_all(), as_json, human)
