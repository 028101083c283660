"""``normfree export``: a study's trials, arms or curves, or a leaderboard, as a CSV, Parquet or
JSON file.

The tables are the API's exports (``normfree.api.export``): built here from the database
(``--db``, the default) by the functions ``GET ...?format=csv|parquet`` calls, or downloaded
from a running server (``--url``). Either way a file has the columns and numbers the API shows.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from normfree.cli import main
from normfree.cli._output import emit, fail, json_option
from normfree.cli._studies import db_option, open_store, settings_for

# normfree.api.export.FILE_FORMATS, spelled here: importing the API would load FastAPI for --help
FORMATS = ("csv", "parquet", "json")
SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".json": "json"}


def _options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The options every export command takes."""
    for option in reversed(
        [
            click.option(
                "--format",
                "fmt",
                type=click.Choice(FORMATS),
                default=None,
                help="File format (default: from --output's suffix, else csv).",
            ),
            click.option(
                "-o",
                "--output",
                default="-",
                metavar="PATH",
                help="File to write ('-', the default: standard output).",
            ),
            click.option(
                "--url",
                default=None,
                metavar="URL",
                help="Download from a running server instead of reading --db (csv or parquet).",
            ),
            click.option("--token", default=None, help="With --url: a token, if reads need one."),
            db_option,
            json_option,
        ]
    ):
        f = option(f)
    return f


@main.group("export")
def export_group() -> None:
    """Trials, arms, learning curves or a leaderboard as a CSV, Parquet or JSON table.

    Trials come with their config, final metrics and a diagnostics summary; curves come long
    (one row per trial, epoch and metric). CSV cells that a spreadsheet would run as formulas
    are written as text. --json prints a summary of the file written (it needs --output)."""


@export_group.command("trials")
@click.argument("study_id", type=click.IntRange(1))
@click.option(
    "--status", multiple=True, help="Only trials in this status (repeatable), e.g. COMPLETE."
)
@_options
def export_trials(study_id: int, status: tuple[str, ...], **opts: Any) -> None:
    """Every trial of STUDY_ID: config, metrics, diagnostics summary."""
    from normfree.specs import TRIAL_STATUSES

    statuses = [s.upper() for s in status] or None
    unknown = sorted(set(statuses or ()) - set(TRIAL_STATUSES))
    if unknown:
        choices = ", ".join(TRIAL_STATUSES)
        fail(f"unknown status {', '.join(unknown)}; choose from {choices}", opts["as_json"])
    _export("trials", study_id, opts, status=statuses)


@export_group.command("arms")
@click.argument("study_id", type=click.IntRange(1))
@_options
def export_arms(study_id: int, **opts: Any) -> None:
    """The arms of STUDY_ID: mean and 95% CI per function and value or options."""
    _export("arms", study_id, opts)


@export_group.command("curves")
@click.argument("study_id", type=click.IntRange(1))
@click.option(
    "--trial",
    "trials",
    multiple=True,
    type=click.IntRange(1),
    help="Only this trial of the study (repeatable).",
)
@_options
def export_curves(study_id: int, trials: tuple[int, ...], **opts: Any) -> None:
    """The learning curves of STUDY_ID's trials, long: one row per trial, epoch and metric
    (train_loss, the validation metrics, lr), for pandas to group or pivot."""
    _export("curves", study_id, opts, trials=list(trials) or None)


@export_group.command("leaderboard")
@click.argument("proxy")
@click.option("--study", "study_id", type=click.IntRange(1), default=None, help="Only its trials.")
@click.option("--group", default=None, help="Only arms of this catalog group.")
@_options
def export_leaderboard(proxy: str, study_id: int | None, group: str | None, **opts: Any) -> None:
    """PROXY's leaderboard: arms ranked over seeds, as the API ranks them."""
    _export("leaderboard", proxy, opts, study_id=study_id, group=group)


def _export(what: str, key: int | str, opts: dict[str, Any], **kw: Any) -> None:
    as_json: bool = opts["as_json"]
    output: str = opts["output"]
    fmt = opts["fmt"] or SUFFIXES.get(Path(output).suffix.lower(), "csv")
    if as_json and output == "-":
        fail("--json prints a summary of the file written: give --output PATH", as_json)
    if output == "-" and fmt == "parquet" and sys.stdout.isatty():
        fail("parquet is binary: give --output PATH (or pipe the output)", as_json)
    if opts["url"]:
        if fmt == "json":
            fail("--url downloads csv or parquet (json: read the API itself)", as_json)
        body, rows = _download(what, key, fmt, opts["url"], opts["token"], kw, as_json)
    else:
        body, rows = _build(what, key, fmt, opts["database_url"], kw, as_json)
    if output == "-":
        sys.stdout.buffer.write(body)
        sys.stdout.flush()
        return
    try:
        Path(output).write_bytes(body)
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}", as_json)
    summary = {"what": what, "key": key, "format": fmt, "rows": rows, "path": output}
    summary["bytes"] = len(body)
    emit(summary, as_json, lambda s: click.echo(f"{s['rows']} rows -> {s['path']} ({fmt})"))


def _build(
    what: str, key: Any, fmt: str, database_url: str | None, kw: dict[str, Any], as_json: bool
) -> tuple[bytes, int]:
    """The table from the database, by the functions the API's routes call."""
    from normfree.api import export, services
    from normfree.api.errors import ApiError

    settings = settings_for(database_url)
    state = services.ServiceState(settings=settings, store=open_store(settings))
    try:
        if what == "leaderboard":
            _analyse(state)  # groups and properties, as a warm server shows them
            rows = export.leaderboard_rows(state, key, **kw)
        elif what == "trials":
            rows = export.trial_rows(state, key, kw.get("status"))
        elif what == "curves":
            rows = export.curve_rows(state, key, kw.get("trials"))
        else:
            rows = export.arm_rows(state, key)
        return export.encode(rows, fmt), len(rows)
    except ApiError as exc:
        fail(exc.message, as_json)
    except export.ExportUnavailable as exc:
        fail(str(exc), as_json)
    finally:
        state.close()


def _analyse(state: Any, timeout: float = 120.0) -> None:
    """What a server does after its start: analyse the functions with finished trials."""
    import time

    from normfree.api import services

    services.warm_up(state)
    deadline = time.monotonic() + timeout
    while services.ENRICHER.pending() and time.monotonic() < deadline:
        time.sleep(0.05)


def _download(
    what: str, key: Any, fmt: str, url: str, token: str | None, kw: dict[str, Any], as_json: bool
) -> tuple[bytes, int | None]:
    """The server's export of the table (through :class:`normfree.Client`)."""
    import httpx

    from normfree.client import Client, ClientError

    try:
        with Client(url, token=token) as nf:
            body = nf.export(what, key, fmt, **kw)  # type: ignore[arg-type]
    except ClientError as exc:
        fail(f"the server answered {exc.status}: {exc.message}", as_json)
    except httpx.HTTPError as exc:
        fail(f"cannot reach {url}: {exc}", as_json)
    return body, _count_rows(body, fmt)


def _count_rows(body: bytes, fmt: str) -> int | None:
    """Rows in a downloaded file (None for parquet where pyarrow is missing)."""
    import io

    if fmt == "csv":
        import csv

        return max(0, sum(1 for _ in csv.reader(io.StringIO(body.decode()))) - 1)
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return None
    return int(pq.read_metadata(io.BytesIO(body)).num_rows)
