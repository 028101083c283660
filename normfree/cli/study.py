"""``normfree study ...``: create, run, watch and steer studies.

Creating a study writes it (and, for grids, all its trials) to storage and then runs its driver
in this process with a live progress bar; ``--detach`` only creates it (run it later, or from
another machine, with ``normfree study run ID``). Every command takes ``--db URL`` (default:
``NORMFREE_DATABASE_URL``) and ``--json``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from normfree.cli import main
from normfree.cli._output import amount, emit, fail, json_option
from normfree.cli._studies import (
    board,
    counts_line,
    db_option,
    exit_if_failed,
    join_early,
    open_store,
    run_driver,
    settings_for,
)
from normfree.cli.leaderboard import board_reliability, print_leaderboard


def _split(text: str | None) -> list[str]:
    """Comma-separated items, commas inside parentheses kept: ``erf,linear_part(erf,0.1)`` is
    two functions. Unbalanced parentheses stay in one item (the resolver says what is wrong)."""
    items, depth, start, text = [], 0, 0, text or ""
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [t.strip() for t in items if t.strip()]


def _floats(text: str, what: str) -> list[float]:
    try:
        return [float(t) for t in _split(text)]
    except ValueError:
        raise click.BadParameter(f"{what} must be comma-separated numbers, got {text!r}") from None


def _scalar(text: str) -> bool | int | float | str:
    low = text.lower()
    if low in ("true", "on", "yes"):
        return True
    if low in ("false", "no"):
        return False
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _create_and_maybe_run(
    spec: Any, database_url: str | None, detach: bool, as_json: bool, parallel: int | None
) -> None:
    from normfree.workers.cost import estimate
    from normfree.workers.driver import create_study

    settings = settings_for(database_url)
    early = None if detach else join_early(settings)  # a running server's cluster, meanwhile
    try:
        # validated whole as REST validates it (workers.validation), then params and cost
        study_id = create_study(spec, settings=settings, request=True)
    except (ValueError, KeyError, ArithmeticError) as exc:
        if early is not None:
            early.discard()
        fail(str(exc), as_json)
    est = estimate(spec, settings)
    store = open_store(settings)
    progress = store.repo.study_progress(study_id)
    out: dict[str, Any] = {
        "study_id": study_id,
        "kind": spec.kind,
        "trials": progress["total"],
        "estimate": est.model_dump(),
    }
    if not detach:
        if not as_json:
            click.echo(
                f"study {study_id}: {spec.kind} on {spec.proxy}, {progress['total']} trials "
                f"(estimated {amount(est.trial_seconds)} trial-seconds)"
            )
        executor = early.executor() if early is not None else None
        out["run"] = run_driver(study_id, settings, as_json, parallel, executor)
        out["leaderboard"] = board(store, spec.proxy, study_id=study_id)
        out["reliability"] = board_reliability(out["leaderboard"])
        out.update(_kind_report(spec.kind, store, study_id))

    def human(r: dict[str, Any]) -> None:
        if detach:
            click.echo(
                f"created study {r['study_id']} ({r['trials']} trials planned, estimated "
                f"{amount(r['estimate']['trial_seconds'])} trial-seconds); "
                f"run it with `normfree study run {r['study_id']}`"
            )
            return
        click.echo(
            f"study {r['study_id']}: {r['run']['status']} in {r['run']['wall_s']} s "
            f"({counts_line(r['run']['counts'])})"
        )
        print_leaderboard(r["leaderboard"])
        print_kind_report(spec.kind, r)

    emit(out, as_json, human)
    if not detach:
        exit_if_failed(study_id, out["run"]["status"], out["leaderboard"], as_json)


common = [
    click.option("--proxy", required=True, help="Proxy preset (e.g. vit-screen, vit-tiny)."),
    click.option("--seeds", default=3, show_default=True, help="Seeds per cell (paired)."),
    click.option("--epochs", type=int, default=None, help="Override the preset's budget."),
    click.option("--name", default=None, help="A label for the study."),
    click.option("--lr", type=float, default=None, help="Override the preset's learning rate."),
    click.option(
        "--parallel", type=int, default=None, help="Trials side by side (default: Ray's CPUs)."
    ),
    click.option("--detach", is_flag=True, help="Only create the study; run it later."),
    db_option,
    json_option,
]


@dataclass(frozen=True)
class Common:
    """The options every ``study <kind>`` command takes, collected once by :func:`_common`."""

    proxy: str
    seeds: int
    epochs: int | None
    name: str | None
    lr: float | None
    parallel: int | None
    detach: bool
    database_url: str | None
    as_json: bool

    def spec(self, kind: str, params: dict[str, Any] | None = None, **fields: Any) -> Any:
        """The StudySpec of this kind: the common fields, ``fields``, and ``params`` (None
        values dropped) with ``--lr``."""
        from normfree.specs import StudySpec

        out = {k: v for k, v in (params or {}).items() if v is not None}
        if self.lr is not None:
            out["lr"] = self.lr
        return StudySpec(
            kind=kind,  # type: ignore[arg-type]
            name=self.name,
            proxy=self.proxy,
            seeds=self.seeds,
            epochs=self.epochs,
            params=out,
            **fields,
        )

    def create(self, spec: Any) -> None:
        _create_and_maybe_run(spec, self.database_url, self.detach, self.as_json, self.parallel)


def _common(f: Any) -> Any:
    """Add the common options; the command receives them as one ``common: Common``."""

    @functools.wraps(f)
    def command(**kw: Any) -> Any:
        shared = {name: kw.pop(name) for name in Common.__dataclass_fields__}
        return f(common=Common(**shared), **kw)

    for opt in reversed(common):
        command = opt(command)
    return command


@main.group()
def study() -> None:
    """Create, run and steer studies (``study kinds`` lists the kinds; ``study new`` makes any)."""


@study.command("property")
@click.option("--transform", required=True, help="A catalog transform (shift_h, shift_v, ...).")
@click.option(
    "--functions", default=None, help="Base functions, comma-separated (default: the paper's)."
)
@click.option(
    "--values", "values_", default=None, help="Transform values (default: the paper's grid)."
)
@click.option(
    "--baselines", default="layernorm", show_default=True, help="Reference cells ('' for none)."
)
@click.option(
    "--shift", type=click.Choice(["none", "scalar", "channel"]), default="none", show_default=True
)
@_common
def study_property(
    transform: str,
    functions: str | None,
    values_: str | None,
    baselines: str,
    shift: str,
    common: Common,
) -> None:
    """Base functions x transform values x paired seeds: every cell runs."""
    from normfree.workers.scheduling import paper_grid

    as_json = common.as_json
    fns, vals, untransformed = _split(functions), [], False
    if values_ is not None:
        vals = _floats(values_, "--values")
    if not fns or values_ is None:
        try:
            paper_fns, paper_vals, untransformed = paper_grid(transform)
        except KeyError:
            fail(
                f"transform {transform!r} has no paper grid: give --functions and --values", as_json
            )
        fns = fns or paper_fns
        if values_ is None:
            vals = paper_vals
        else:
            untransformed = False
    common.create(
        common.spec(
            "property",
            {"untransformed_cell": True} if untransformed else {},
            functions=fns,
            transform=transform,
            values=vals,
            baselines=_split(baselines),
            norm_shift=shift,
        )
    )


@study.command("options")
@click.option("--functions", required=True, help="Functions, comma-separated.")
@click.option(
    "--option",
    "options",
    multiple=True,
    metavar="NAME=V1,V2",
    help="An option axis, repeatable: layerscale_init=off,1e-5,1e-1  depth_scaled_init=false,true"
    "  alpha0=0.5,1  shift=none,scalar,channel (any proxy-config field works too).",
)
@click.option("--baselines", default="layernorm", show_default=True)
@_common
def study_options(
    functions: str,
    options: tuple[str, ...],
    baselines: str,
    common: Common,
) -> None:
    """Functions x every combination of option values x paired seeds."""
    axes: dict[str, list[Any]] = {}
    for item in options:
        key, sep, vals = item.partition("=")
        if not sep or not key.strip() or not _split(vals):
            fail(f"--option wants NAME=V1,V2,...; got {item!r}", common.as_json)
        axes[key.strip()] = [_scalar(v) for v in _split(vals)]
    common.create(
        common.spec(
            "options", functions=_split(functions), options=axes, baselines=_split(baselines)
        )
    )


@study.command("search")
@click.option("--functions", default=None, help="Candidates (default: the whole catalog).")
@click.option("--n-trials", type=int, default=None, help="Optuna trials (default: #candidates).")
@click.option("--sampler", type=click.Choice(["tpe", "random"]), default="tpe", show_default=True)
@click.option(
    "--pruner",
    type=click.Choice(["hyperband", "sha", "median", "none"]),
    default="hyperband",
    show_default=True,
)
@click.option(
    "--extra-seeds",
    type=int,
    default=2,
    show_default=True,
    help="Extra seeds for each of the top arms before ranking.",
)
@click.option("--top", type=int, default=3, show_default=True, help="How many arms get them.")
@click.option("--alpha0-range", default=None, help="Also search alpha0 in LO,HI (log).")
@click.option("--lr-range", default=None, help="Also search the learning rate in LO,HI (log).")
@click.option("--sampler-seed", type=int, default=0, show_default=True)
@click.option(
    "--min-epochs",
    type=int,
    default=None,
    help="No pruning before this epoch (default: a quarter of the budget).",
)
@_common
def study_search(
    functions: str | None,
    n_trials: int | None,
    sampler: str,
    pruner: str,
    extra_seeds: int,
    top: int,
    alpha0_range: str | None,
    lr_range: str | None,
    sampler_seed: int,
    min_epochs: int | None,
    common: Common,
) -> None:
    """A sampler picks candidates; a pruner stops poor ones early; the best get extra seeds."""
    extra: dict[str, Any] = {"top_arms": top, "sampler_seed": sampler_seed}
    if min_epochs is not None:
        extra["min_resource"] = min_epochs
    for key, text in (("alpha0_range", alpha0_range), ("lr_range", lr_range)):
        if text:
            rng = _floats(text, f"--{key.replace('_', '-')}")
            if len(rng) != 2 or not 0 < rng[0] < rng[1]:
                fail(f"--{key.replace('_', '-')} wants LO,HI with 0 < LO < HI", common.as_json)
            extra[key] = rng
    common.create(
        common.spec(
            "search",
            extra,
            functions=_split(functions),
            sampler=sampler,
            pruner=pruner,
            n_trials=n_trials,
            extra_seeds_for_top=extra_seeds,
        )
    )


@study.command("generate")
@click.option("--generations", type=int, default=3, show_default=True, help="Evolution rounds.")
@click.option(
    "--population", type=int, default=8, show_default=True, help="Aging window; generation 0."
)
@click.option("--children", type=int, default=None, help="Trained per round (default P/2).")
@click.option("--tournament", type=int, default=3, show_default=True)
@click.option("--p-crossover", type=float, default=0.25, show_default=True)
@click.option(
    "--constraints", default=None, help='Property constraints, e.g. "bounded and monotone".'
)
@click.option(
    "--functions",
    default=None,
    help="Seed generation 0 with these functions (catalog or stored names, formulas).",
)
@click.option("--baselines", default="layernorm", show_default=True)
@click.option("--max-size", type=int, default=24, show_default=True, help="sympy nodes per tree.")
@click.option("--max-depth", type=int, default=6, show_default=True)
@click.option("--max-prescreen", type=int, default=None, help="Prescreens per generation.")
@click.option("--no-prescreen", is_flag=True, help="Rank survivors by proposal order instead.")
@click.option(
    "--pruner",
    type=click.Choice(["none", "sha", "hyperband", "median"]),
    default="none",
    show_default=True,
)
@click.option("--sampler-seed", type=int, default=0, show_default=True)
@_common
def study_generate(
    generations: int,
    population: int,
    children: int | None,
    tournament: int,
    p_crossover: float,
    constraints: str | None,
    functions: str | None,
    baselines: str,
    max_size: int,
    max_depth: int,
    max_prescreen: int | None,
    no_prescreen: bool,
    pruner: str,
    sampler_seed: int,
    common: Common,
) -> None:
    """Evolve new functions from the expression grammar; only filtered survivors are trained."""
    extra: dict[str, Any] = {
        "generations": generations,
        "population": population,
        "children": children,
        "tournament": tournament,
        "p_crossover": p_crossover,
        "constraints": constraints,
        "max_size": max_size,
        "max_depth": max_depth,
        "max_prescreen": max_prescreen,
        "prescreen": not no_prescreen,
        "sampler_seed": sampler_seed,
    }
    common.create(
        common.spec(
            "generate",
            extra,
            functions=_split(functions),
            baselines=_split(baselines),
            pruner=pruner,
        )
    )


@study.command("new")
@click.argument("kind")
@click.option("--functions", default=None, help="Functions, comma-separated.")
@click.option("--baselines", default="layernorm", show_default=True)
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="KEY=VALUE",
    help="A StudySpec.params entry, repeatable; VALUE is JSON or plain text.",
)
@click.option("--spec", "spec_json", default=None, help="Other StudySpec fields as a JSON object.")
@_common
def study_new(
    kind: str,
    functions: str | None,
    baselines: str,
    params: tuple[str, ...],
    spec_json: str | None,
    common: Common,
) -> None:
    """A study of any registered KIND (``normfree study kinds``), from its StudySpec fields: what
    a kind needs no command of its own for."""
    import json

    from pydantic import ValidationError

    from normfree.workers import kinds

    try:
        kinds.get(kind)
        fields = json.loads(spec_json) if spec_json else {}
        if not isinstance(fields, dict):
            raise ValueError("--spec must be a JSON object")
    except ValueError as exc:
        fail(str(exc), common.as_json)
    values: dict[str, Any] = {}
    for item in params:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            fail(f"--param wants KEY=VALUE; got {item!r}", common.as_json)
        try:
            values[key.strip()] = json.loads(text)
        except ValueError:
            values[key.strip()] = text
    fields.setdefault("functions", _split(functions))
    fields.setdefault("baselines", _split(baselines))
    try:
        spec = common.spec(kind, values, **fields)
    except (ValidationError, TypeError) as exc:
        fail(f"invalid study: {exc}", common.as_json)
    common.create(spec)


@study.command("kinds")
@json_option
def study_kinds(as_json: bool) -> None:
    """The registered study kinds, each with what it runs."""
    from normfree.workers import kinds

    rows = [{"kind": k.name, "summary": k.summary} for k in kinds.KINDS.values()]
    emit(rows, as_json, lambda items: [click.echo(f"{r['kind']}\t{r['summary']}") for r in items])


def _kind_report(kind: str, store: Any, study_id: int) -> dict[str, Any]:
    """What the study's kind reports beyond its leaderboard, under the kind's name (generate)."""
    from normfree.workers import kinds

    report = kinds.get(kind).report(store, study_id)
    return {} if report is None else {kind: report}


def print_kind_report(kind: str, out: dict[str, Any]) -> None:
    """The kind's report (under its name in ``out``), as the kind words it for people."""
    from normfree.workers import kinds

    if kind in out:
        for line in kinds.get(kind).report_lines(out[kind]):
            click.echo(line)


def _study_or_fail(store: Any, study_id: int, as_json: bool) -> dict[str, Any]:
    found = store.repo.get_study(study_id)
    if found is None:
        fail(f"no study {study_id}", as_json, code=1)
    return found


@study.command("run")
@click.argument("study_id", type=int)
@click.option("--parallel", type=int, default=None)
@db_option
@json_option
def study_run(study_id: int, parallel: int | None, database_url: str | None, as_json: bool) -> None:
    """Run (or resume after a crash) the driver of study STUDY_ID until it is done."""
    settings = settings_for(database_url)
    store = open_store(settings)
    found = _study_or_fail(store, study_id, as_json)
    out = run_driver(study_id, settings, as_json, parallel)
    out["leaderboard"] = board(store, found["proxy"], study_id=study_id)
    out["reliability"] = board_reliability(out["leaderboard"])
    out.update(_kind_report(found["kind"], store, study_id))

    def human(r: dict[str, Any]) -> None:
        click.echo(f"study {study_id}: {r['status']} ({counts_line(r['counts'])})")
        print_leaderboard(r["leaderboard"])
        print_kind_report(found["kind"], r)

    emit(out, as_json, human)
    exit_if_failed(study_id, out["status"], out["leaderboard"], as_json)


def _status_table(p: dict[str, Any]) -> Any:
    """A study's progress (``workers.progress``: the numbers the API and the page show)."""
    from rich.table import Table

    t = Table(title=f"study {p['study_id']} ({p['state']})")
    for col in ("status", "trials"):
        t.add_column(col)
    for k, v in p["counts"].items():
        if v:
            t.add_row(k, str(v))
    t.add_row("finished", f"{p['finished']}/{p['total']} ({100 * p['fraction']:.0f}%)")
    if p.get("reused"):
        t.add_row("reused", f"{p['reused']} (an earlier study's results, not trained again)")
    if p.get("throughput_per_min") is not None:
        t.add_row("throughput", f"{p['throughput_per_min']:.3g} trials/min")
    if p.get("eta_at"):
        t.add_row("ETA", f"{p['eta_at'][:19].replace('T', ' ')} UTC")
    if p.get("best"):
        b = p["best"]
        seeds = f"{b['n']} seed{'s' if b['n'] != 1 else ''}"
        t.add_row("best arm", f"{b['label']}: {b['objective']} {b['mean']:.4g} ({seeds})")
    return t


@study.command("status")
@click.argument("study_id", type=int)
@click.option("--watch", is_flag=True, help="Refresh live until the study stops running.")
@click.option("--interval", type=float, default=1.0, show_default=True)
@db_option
@json_option
def study_status(
    study_id: int, watch: bool, interval: float, database_url: str | None, as_json: bool
) -> None:
    """Progress of a study: trials per status, throughput, ETA, the best arm so far."""
    from normfree.workers import progress as live

    store = open_store(settings_for(database_url))

    def read() -> dict[str, Any]:
        found = live.read(store.db, study_id)
        if found is None:
            fail(f"no study {study_id}", as_json, code=1)
        return found.as_dict()

    now = read()
    if watch and not as_json:
        from rich.live import Live

        with Live(_status_table(now), refresh_per_second=4) as shown:
            while now["state"] in live.DRIVEN_STATUSES:
                time.sleep(interval)
                now = read()
                shown.update(_status_table(now))
        return

    def human(p: dict[str, Any]) -> None:
        from rich.console import Console

        Console().print(_status_table(p))

    emit(now, as_json, human)


def _steer(
    study_id: int, action: str, database_url: str | None, as_json: bool, *, restart: bool = False
) -> dict:
    """Apply a transition through the one state machine the API uses (``workers.lifecycle``)."""
    from normfree.workers import lifecycle

    store = open_store(settings_for(database_url))
    row = store.repo.get_study(study_id)
    if row is not None and row.get("archived_at") is not None:  # as the API refuses it (409)
        fail(f"study {study_id} is archived: `normfree study archive {study_id} --restore` "
             "first", as_json, code=1)  # fmt: skip
    try:
        done = lifecycle.steer(store.repo, study_id, action, restart=restart)
    except KeyError:
        fail(f"no study {study_id}", as_json, code=1)
    except lifecycle.TransitionError as exc:
        fail(str(exc), as_json, code=1)
    out: dict[str, Any] = {"study_id": study_id, "status": done.after}
    if action == "cancel":
        out["cancelled_waiting"] = done.cancelled_waiting
    return out


def _steer_command(action: str, text: str, said: Callable[[int, dict[str, Any]], str]) -> None:
    """``normfree study ACTION STUDY_ID``: a transition with nothing more to do here."""

    @study.command(action, help=text)
    @click.argument("study_id", type=int)
    @db_option
    @json_option
    def command(study_id: int, database_url: str | None, as_json: bool) -> None:
        out = _steer(study_id, action, database_url, as_json)
        emit(out, as_json, lambda r: click.echo(said(study_id, r)))


_steer_command(
    "pause",
    "Stop leasing at once; running trials stop at their next epoch and wait (uncharged).",
    lambda sid, r: f"study {sid} paused",
)
_steer_command(
    "cancel",
    "Cancel: waiting trials never run; running ones stop at their next epoch.",
    lambda sid, r: f"study {sid} cancelled ({r['cancelled_waiting']} waiting trials dropped)",
)


@study.command("resume")
@click.argument("study_id", type=int)
@click.option("--detach", is_flag=True, help="Only mark it resumable; do not run the driver.")
@click.option("--parallel", type=int, default=None)
@db_option
@json_option
def study_resume(
    study_id: int, detach: bool, parallel: int | None, database_url: str | None, as_json: bool
) -> None:
    """Resume a paused study and run its driver here (unless --detach)."""
    out = _steer(study_id, "resume", database_url, as_json, restart=not detach)
    if not detach:
        out["run"] = run_driver(study_id, settings_for(database_url), as_json, parallel)
    emit(out, as_json, lambda r: click.echo(f"study {study_id}: {r.get('run', r)['status']}"))


@study.command("list")
@click.option("--tag", default=None, help="Only studies with this tag.")
@click.option("--archived", is_flag=True, help="Archived studies too.")
@db_option
@json_option
def study_list(tag: str | None, archived: bool, database_url: str | None, as_json: bool) -> None:
    """Studies, newest first (archived ones with --archived), with their tags and note."""
    from normfree.workers import progress

    store = open_store(settings_for(database_url))
    rows = []
    for r in store.repo.list_studies(archived=archived, tag=tag):
        snap = progress.snapshot(store.db, r["id"])
        if snap is not None:  # deleted since the list was read
            # the state shown beside the counts, from the same snapshot (workers.progress)
            rows.append({**r, "state": snap.progress().state, "progress": snap.counts})

    def human(items: list[dict[str, Any]]) -> None:
        for r in items:
            extra = "".join(
                (
                    "\tarchived" if r["archived_at"] else "",
                    f"\t[{', '.join(r['tags'])}]" if r["tags"] else "",
                    f"\t{r['note']}" if r["note"] else "",
                )
            )
            click.echo(
                f"{r['id']}\t{r['kind']}\t{r['proxy']}\t{r['state']}\t"
                f"{counts_line(r['progress'])}{extra}"
            )

    emit(rows, as_json, human)
