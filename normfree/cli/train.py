"""``normfree train`` (one trial, with a progress bar and a summary) and ``normfree prescreen``."""

from __future__ import annotations

from typing import Any

import click

from normfree.cli import main
from normfree.cli._output import emit, fail, json_option
from normfree.cli._studies import db_option
from normfree.workers.proxies import DEFAULT_PROXY, PROXIES

NORM_HELP = (
    "What fills every norm slot: layernorm, rmsnorm, identity, derf (erf with a scalar shift s), "
    "dyt (tanh without s), a catalog name, a stored candidate's name (see --db), a formula, or a "
    "transform call on any of these like 'shift_h(erf, 0.5)'."
)


def _parse_sets(items: tuple[str, ...], as_json: bool) -> dict[str, Any]:
    """``KEY=VALUE`` overrides; values become int, float or bool where they look like one."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            fail(f"--set expects KEY=VALUE, got {item!r}", as_json)
        value: Any = raw
        if raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        else:
            for cast in (int, float):
                try:
                    value = cast(raw)
                    break
                except ValueError:
                    pass
        out[key.strip()] = value
    return out


def _norm_spec(
    norm: str, shift: str | None, alpha0: float | None, as_json: bool, database_url: str | None
):
    """The NormSpec of ``--norm``, resolved now (one line and rc 2 for anything unknown, with
    the nearest names). A stored candidate's name (nested in transforms too) is looked up in
    the database only when the catalog does not know the text, and its definition goes into
    the spec, as a study's would."""
    from pydantic import ValidationError

    from normfree.search_space import ExpressionError, resolver
    from normfree.workers.trainer import parse_norm

    try:
        spec = parse_norm(norm, shift=shift, alpha0=alpha0)
    except ValidationError as exc:
        fail(f"invalid norm options: {exc.errors()[0]['msg']}", as_json)
    if spec.is_baseline:
        return spec
    try:
        resolver.bake(spec.name)
        return spec
    except ExpressionError as exc:
        first = exc
    from normfree.cli._studies import NoDatabase, bake_stored

    try:
        _, definition = bake_stored(spec.name, database_url)
    except ExpressionError as exc:
        fail(f"--norm: {exc}", as_json)
    except NoDatabase as exc:  # the catalog's answer stands
        fail(f"--norm: {first} (stored candidates not searched: {exc})", as_json)
    return spec.model_copy(update={"formula": definition})


def _summary(result: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    style = {"complete": "green", "diverged": "red", "pruned": "yellow", "failed": "red"}
    console.print(f"status: [{style.get(result.status, 'white')}]{result.status}[/]")
    if result.diverged_at_step is not None:
        console.print(f"diverged at step {result.diverged_at_step}")
    if result.error:
        console.print(f"error: {result.error}")
    table = Table(title=f"metrics (objective: {result.objective}, {result.direction})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in sorted(result.metrics.items()):
        table.add_row(key, f"{value:.4g}")
    if result.eval_train_loss is not None:
        table.add_row("eval_train_loss", f"{result.eval_train_loss:.4g}")
    table.add_row("train time (s)", f"{result.train_time_s:.1f}")
    table.add_row("total time (s)", f"{result.total_time_s:.1f}")
    console.print(table)
    if result.diagnostics:
        last = max(d.epoch for d in result.diagnostics)
        diag = Table(title=f"norm slots after epoch {last}")
        diag.add_column("layer", no_wrap=True, min_width=15)
        for col in ("alpha", "s", "gamma", "in std", "absmax", "branch", "grad"):
            diag.add_column(col, justify="right")

        def fmt(v: float | None) -> str:
            return "-" if v is None else f"{v:.3g}"

        for d in result.diagnostics:
            if d.epoch == last:
                diag.add_row(
                    d.layer,
                    *map(
                        fmt,
                        (
                            d.alpha,
                            d.s_mean,
                            d.gamma_mean,
                            d.input_std,
                            d.input_absmax,
                            d.branch_norm,
                            d.grad_norm,
                        ),
                    ),
                )
        console.print(diag)


@main.command("train")
@click.option(
    "--proxy", type=click.Choice(sorted(PROXIES)), default=DEFAULT_PROXY, show_default=True
)
@click.option("--norm", default="derf", show_default=True, help=NORM_HELP)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="Default: the preset's.")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=None)
@click.option("--dataset", default=None, help="digits, mnist, mnist1d, an .npz or image folder.")
@click.option("--shift", type=click.Choice(["none", "scalar", "channel"]), default=None)
@click.option("--alpha0", type=float, default=None, help="Initial alpha (default 0.5).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Proxy config override.")
@db_option
@json_option
def train(
    proxy: str,
    norm: str,
    seed: int,
    epochs: int | None,
    lr: float | None,
    dataset: str | None,
    shift: str | None,
    alpha0: float | None,
    sets: tuple[str, ...],
    database_url: str | None,
    as_json: bool,
) -> None:
    """Train one proxy trial with NORM in every norm slot and print its result."""
    from tqdm import tqdm

    from normfree.kernels import KernelOptions
    from normfree.settings import get_settings
    from normfree.specs import TrialConfig
    from normfree.workers.trainer import resolve, select_device, train_trial

    spec = _norm_spec(norm, shift, alpha0, as_json, database_url)
    config = TrialConfig(
        proxy=proxy,
        norm=spec,
        seed=seed,
        epochs=epochs,
        lr=lr,
        dataset=dataset,
        overrides=_parse_sets(sets, as_json),
    )
    try:
        total = resolve(config, allow_paths=True).preset.epochs
    except ValueError as exc:
        fail(str(exc), as_json)
    bar = tqdm(total=total, desc=f"{proxy} {spec.name}", unit="epoch", disable=as_json)

    def report(rec: Any) -> None:
        bar.set_postfix(
            loss=f"{rec.train_loss:.3f}", **{k: f"{v:.3f}" for k, v in rec.metrics.items()}
        )
        bar.update(1)

    try:
        settings = get_settings()
        result = train_trial(
            config,
            report=report,
            threads=settings.trial_threads,
            device=select_device(settings),
            allow_paths=True,
            kernels=KernelOptions.from_settings(settings),
        )
    except ValueError as exc:
        fail(str(exc), as_json)
    finally:
        bar.close()
    emit(result.model_dump(mode="json"), as_json, lambda _: _summary(result))
    if result.status == "failed":
        raise SystemExit(1)


@main.command("prescreen")
@click.option(
    "--proxy", type=click.Choice(sorted(PROXIES)), default=DEFAULT_PROXY, show_default=True
)
@click.option("--norm", default="derf", show_default=True, help=NORM_HELP)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--shift", type=click.Choice(["none", "scalar", "channel"]), default=None)
@db_option
@json_option
def prescreen_cmd(
    proxy: str, norm: str, seed: int, shift: str | None, database_url: str | None, as_json: bool
) -> None:
    """Zero-cost check of NORM: signal propagation at init and survival of high-lr steps."""
    from normfree.workers.prescreen import prescreen

    spec = _norm_spec(norm, shift, None, as_json, database_url)
    try:
        out = prescreen(spec, proxy=proxy, seed=seed)
    except ValueError as exc:
        fail(str(exc), as_json)

    def human(o: dict[str, Any]) -> None:
        verdict = "survives" if o["survives"] else "FAILS"
        click.echo(f"{o['norm']['name']} on {o['proxy']}: {verdict} {o.get('steps', 0)} steps")
        for key in (
            "initial_loss",
            "final_loss",
            "loss_ratio",
            "std_growth",
            "grad_ratio",
            "error",
        ):
            if o.get(key) is not None:
                v = o[key]
                click.echo(f"  {key}: {v:.4g}" if isinstance(v, float) else f"  {key}: {v}")

    emit(out, as_json, human)
