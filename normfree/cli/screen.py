"""``normfree screen FUNCTION``: place a function among the paper's 16 search candidates.

One options study per default screen (``workers.screens``: the 16 + the function + LayerNorm +
the identity, with the published operator), created, or found again when the same screen was
asked before; its driver runs here unless ``--detach``; trials another study already ran are
reused, not trained. Prints where the function ranks, with the board's rank reliability and
the screen's fidelity beside it.
"""

from __future__ import annotations

from typing import Any

import click

from normfree.cli import main
from normfree.cli._output import emit, fail, json_option
from normfree.cli._studies import db_option, open_store, run_driver, settings_for


def _screen_one(
    function: str,
    proxy: str,
    *,
    seeds: int,
    epochs: int | None,
    settings: Any,
    store: Any,
    detach: bool,
    parallel: int | None,
    as_json: bool,
) -> dict[str, Any]:
    """Create (or find) the screen on ``proxy``, run it unless ``detach``, place ``function``."""
    from normfree.workers import screens
    from normfree.workers.driver import create_study
    from normfree.workers.validation import prepare, stored_names

    try:
        spec = prepare(
            screens.screen_spec(function, proxy, seeds=seeds, epochs=epochs),
            stored_names(store.repo),
        )
        study_id = screens.find_screen(store.repo, spec)
        found = study_id is not None
        if study_id is None:
            study_id = create_study(spec, settings=settings, validated=True)
    except (ValueError, KeyError, ArithmeticError) as exc:
        fail(str(exc), as_json)
    progress = store.repo.study_progress(study_id)
    out: dict[str, Any] = {
        "proxy": proxy,
        "study_id": study_id,
        "found_existing": found,
        "trials": progress["total"],
        "reused": progress["reused"],
        "to_train": progress["counts"]["WAITING"] + progress["counts"]["RUNNING"],
    }
    if not as_json:
        what = "found" if found else "created"
        click.echo(
            f"{proxy}: {what} study {study_id}, {out['trials']} trials ({out['reused']} reused "
            f"from earlier studies, {out['to_train']} to train)"
        )
    if not detach and out["to_train"]:
        out["run"] = run_driver(study_id, settings, as_json, parallel)
    rows = screens.screen_board(store, study_id, proxy)
    # one of the 16 is placed as itself; another name as the validation spelled it (last)
    name = function if function in spec.functions else spec.functions[-1]
    out["placement"] = screens.placement(
        rows, name, proxy, fidelity_headline=screens.fidelity_line(store.repo.db, proxy)
    )
    return out


@main.command("screen")
@click.argument("function")
@click.option(
    "--proxy",
    "proxies",
    multiple=True,
    help="A screen to place it on (repeatable; default: the default ViT and DiT screens).",
)
@click.option("--seeds", default=3, show_default=True, help="Paired seeds per arm.")
@click.option("--epochs", type=int, default=None, help="Override the preset's budget.")
@click.option("--detach", is_flag=True, help="Create (or find) the studies; do not run them.")
@click.option("--parallel", type=int, default=None, help="Trials side by side.")
@db_option
@json_option
def screen(
    function: str,
    proxies: tuple[str, ...],
    seeds: int,
    epochs: int | None,
    detach: bool,
    parallel: int | None,
    database_url: str | None,
    as_json: bool,
) -> None:
    """Where FUNCTION ranks among the 16 search candidates, with the published operator
    (y = gamma f(alpha x + s) + beta), beside LayerNorm and no norm, on the default screens;
    with the ranking's reliability and the screen's fidelity. FUNCTION is a catalog name, a
    stored candidate or a formula in u."""
    from normfree.workers.proxies import DEFAULT_SCREENS

    if seeds < 2:
        fail("--seeds must be at least 2 (a rank reliability needs two halves)", as_json)
    settings = settings_for(database_url)
    store = open_store(settings)
    store.repo.db.migrate()
    results = [
        _screen_one(
            function,
            proxy,
            seeds=seeds,
            epochs=epochs,
            settings=settings,
            store=store,
            detach=detach,
            parallel=parallel,
            as_json=as_json,
        )
        for proxy in (proxies or DEFAULT_SCREENS)
    ]

    def human(r: dict[str, Any]) -> None:
        for s in r["screens"]:
            p = s["placement"]
            click.echo(p["text"])
            for note in p["caveats"]:
                click.echo(f"  caveat: {note}")
            if p.get("within_noise"):
                click.echo(f"  within noise of it: {', '.join(p['within_noise'])}")

    emit({"function": function, "screens": results}, as_json, human)
