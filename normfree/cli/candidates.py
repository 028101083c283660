"""``normfree candidates list|show|check``: the catalog and user formulas, with their properties.

``check`` is the dry run of a submission: parse, canonical form, fingerprint, properties and the
catalog entry it duplicates, if any. A rejected formula exits with status 2 and the reason (and,
with ``--json``, ``{"error", "position"}``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import click

from normfree.cli import main
from normfree.cli._output import emit, fail, json_option


def _row(c: Any) -> dict[str, str]:
    """The columns of the people table for one candidate."""
    p = c.properties
    growth = "bounded" if p.bounded else p.growth
    if p.growth_exponent is not None and not p.bounded and p.growth != "linear":
        growth += f" {p.growth_exponent:g}"
    return {
        "name": c.name,
        "group": c.group,
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
        else ("kinks " + ",".join(f"{x:.3g}" for x in p.non_differentiable_at))
        if p.continuous
        else "jumps",
        "formula": c.formula,
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


def evaluate_candidates(cands: Iterable[Any], progress: bool) -> list[Any]:
    """Compute every candidate's properties, with a progress bar on stderr when asked."""
    from tqdm import tqdm

    cands = list(cands)
    for c in tqdm(cands, desc="properties", unit="fn", file=sys.stderr, disable=not progress):
        _ = c.properties
    return cands


@main.group()
def candidates() -> None:
    """The catalog of pointwise functions, and checks of your own formulas."""


@candidates.command("list")
@click.option("--group", default=None, help="Only this group (natural, ratio, growth, ...).")
@json_option
def list_cmd(group: str | None, as_json: bool) -> None:
    """A table of every catalog candidate with its properties, then the baselines."""
    from normfree.search_space import catalog

    cands = evaluate_candidates(catalog.all(group), progress=not as_json)
    if not cands and group is not None:
        fail(f"no candidates in group {group!r}", as_json)
    result = {
        "candidates": [c.to_dict() for c in cands],
        "baselines": [b.to_dict() for b in catalog.baselines()] if group is None else [],
    }

    def human(_: Any) -> None:
        click.echo(render_table([_row(c) for c in cands]))
        if result["baselines"]:
            click.echo(
                "\nbaselines (reference modules, not formulas): "
                + ", ".join(b["name"] for b in result["baselines"])
            )

    emit(result, as_json, human)


def _details(c: Any) -> None:
    d = c.to_dict()
    for key in ("name", "group", "formula", "expr", "derivative", "canonical", "fingerprint"):
        click.echo(f"{key:12s} {d[key]}")
    click.echo(f"{'lineage':12s} {c.lineage.call}")
    if c.citation:
        click.echo(f"{'citation':12s} {c.citation}")
    click.echo(f"{'properties':12s} {c.properties.summary()}")
    for k, v in d["properties"].items():
        click.echo(f"  {k:22s} {v}")


# A formula may start with a minus ("-erf(u)"): unknown "options" are taken as the argument, so
# it needs no "--" (the command's real options, --json and --name, still work).
_FORMULA_ARGS = {"ignore_unknown_options": True}


@candidates.command("show", context_settings=_FORMULA_ARGS)
@click.argument("name")
@json_option
def show_cmd(name: str, as_json: bool) -> None:
    """One candidate: a catalog name, a baseline, or a transform call like 'shift_h(erf, 0.5)'."""
    from normfree.search_space import ExpressionError, catalog

    if catalog.is_baseline(name):
        b = catalog.baseline(name)
        emit(
            b.to_dict(),
            as_json,
            lambda d: click.echo("\n".join(f"{k:12s} {v}" for k, v in d.items())),
        )
        return
    try:
        c = catalog.resolve(name)
    except ExpressionError as exc:
        fail(f"unknown candidate {name!r}: {exc}", as_json, position=exc.position)
    emit(c.to_dict(), as_json, lambda _: _details(c))


@candidates.command("check", context_settings=_FORMULA_ARGS)
@click.argument("formula")
@click.option("--name", default=None, help="Name for the candidate (default: the formula).")
@json_option
def check_cmd(formula: str, name: str | None, as_json: bool) -> None:
    """Parse FORMULA (in u), print its canonical form, properties and duplicate, if any."""
    from normfree.search_space import ExpressionError, catalog, find_duplicate, parse

    try:
        c = parse(formula, name=name)
    except ExpressionError as exc:
        fail(f"formula rejected: {exc}", as_json, position=exc.position, reason=exc.message)
    dup = find_duplicate(c, catalog.all())
    result = {**c.to_dict(), "duplicate_of": dup.name if dup is not None else None}

    def human(_: Any) -> None:
        _details(c)
        click.echo(f"{'duplicate of':12s} {result['duplicate_of'] or '-'}")

    emit(result, as_json, human)
