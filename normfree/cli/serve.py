"""``normfree serve`` (the API and dashboard) and ``normfree token create|revoke|list``.

``serve`` runs uvicorn over :func:`normfree.api.create_app` on the embedded default (SQLite in the
working directory, studies driven in-process on a local Ray) and prints the URL first, so a
person or a script knows where to point a browser or curl. Tokens are write credentials for the
REST API: the plaintext is printed once, only its hash is stored.
"""

from __future__ import annotations

import click

from normfree.cli import main
from normfree.cli._output import emit, fail, json_option


@main.command()
@click.option("--host", default=None, help="Interface to bind (default: NORMFREE_HOST, 127.0.0.1).")
@click.option(
    "--port", default=None, type=click.IntRange(0, 65535), help="Port (default: NORMFREE_PORT)."
)
@click.option(
    "--run-studies/--no-run-studies",
    default=True,
    show_default=True,
    help="Drive studies created through the API inside this process (embedded default).",
)
@click.option("--log-level", default="info", show_default=True, help="uvicorn log level.")
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Server processes. Reads are CPU-bound Python: on PostgreSQL (or a read-mostly SQLite "
    "file) N processes serve up to N cores. More than one needs --no-run-studies (each "
    "process would drive the same studies); run them with `normfree study run` or Ray jobs.",
)
def serve(
    host: str | None, port: int | None, run_studies: bool, log_level: str, workers: int
) -> None:
    """Start the REST API and the dashboard; prints the URL.

    SIGTERM or Ctrl-C stops it cleanly, exit status 0: the study being driven here is stopped
    (its running trials handed back; `normfree study run ID` carries it on) and the embedded
    Ray is stopped with every process it started.

    The embedded Ray starts with the server and stays up while it serves (unless
    NORMFREE_SHARE_LOCAL_CLUSTER=false): study commands on this host join it instead of
    starting their own, so a small study's first trial starts within seconds.
    """
    import uvicorn

    from normfree.api import create_app
    from normfree.cli._signals import exit_zero_on_signals

    # Before anything slow: a signal while the app is built ends the process quietly too, and
    # uvicorn raises the signal it stopped on again under these handlers once it has shut down.
    exit_zero_on_signals()
    from normfree.settings import get_settings

    settings = get_settings()
    host = host or settings.host
    port = settings.port if port is None else port
    if workers > 1 and run_studies:
        raise click.UsageError(
            "--workers > 1 needs --no-run-studies: every process would drive the same studies"
        )
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    shown = f"[{shown}]" if ":" in shown else shown  # an IPv6 address in a URL
    # a server asks its warmed studies' pages from the URL it prints, as their readers will
    # (api.app.warm_pages); not with port 0, whose port the system picks later
    announced = f"http://{shown}:{port}" if port else None
    app = (
        create_app(settings, run_studies=run_studies, freeze_heap=True, announced_url=announced)
        if workers == 1
        else None
    )
    runner = app.state.services.runner if app is not None else None
    if (
        runner is not None
        and settings.share_local_cluster
        and not settings.ray_address
        and hasattr(runner, "warm")
    ):
        # The local cluster starts now, in the background, and stays up while we serve:
        # studies created here skip Ray's start-up, and `normfree study ...` commands on this
        # host join it (workers.localray.running).
        runner.warm()
    if app is None:
        from normfree import storage
        from normfree.api.services.state import recover_at_start

        # migrate and recover interrupted creations once, before the processes start
        store = storage.open(settings, optuna=False)
        recover_at_start(store)
        store.close()
    click.echo(
        f"normfree dashboard: http://{shown}:{port}/  (API docs: http://{shown}:{port}/docs)"
    )
    click.echo(f"database: {settings.database_url}", err=True)
    # uvicorn's own proxy handling is off: by default it trusts X-Forwarded-For from 127.0.0.1,
    # which let any local client pick its address (issue 28). The app decides who the client
    # is, from NORMFREE_TRUSTED_PROXIES (api.security.client_id).
    proxies = {"proxy_headers": False, "forwarded_allow_ips": ""}
    if app is not None:
        uvicorn.run(app, host=host, port=port, log_level=log_level, **proxies)
    else:
        uvicorn.run(
            "normfree.api.app:create_worker_app",
            factory=True,
            host=host,
            port=port,
            log_level=log_level,
            workers=workers,
            **proxies,
        )


@main.group()
def token() -> None:
    """API write tokens (stored hashed; the plaintext is shown once)."""


def _repository():
    from normfree.api.services import open_repository
    from normfree.settings import get_settings

    return open_repository(get_settings())


@token.command("create")
@click.argument("name")
@click.option(
    "--scope",
    type=click.Choice(["read", "write", "admin"]),
    default="write",
    show_default=True,
    help="read: reads when they are private; write: also submit, and control what it created; "
    "admin: also control, replace or delete what any token created.",
)
@click.option(
    "--expires",
    default=None,
    metavar="WHEN",
    help="Refuse the token (401) after WHEN: a duration (90m, 12h, 30d, 2w) or a date "
    "(2027-01-31, UTC). Default: never.",
)
@click.option(
    "--expires-days",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Refuse the token after this many days (default: never).",
)
@json_option
def token_create(
    name: str, scope: str, expires: str | None, expires_days: float | None, as_json: bool
) -> None:
    """Create a token NAME (write scope unless --scope) and print it (once)."""
    from normfree.api.services import create_token

    repo = _repository()
    try:
        plaintext = create_token(
            repo, name, scope=scope, expires_days=expires_days, expires=expires
        )
    except ValueError as exc:
        fail(str(exc), as_json)
    expires_at = next((t["expires_at"] for t in repo.list_tokens() if t["name"] == name), None)

    def human(r: dict[str, str]) -> None:
        click.echo(r["token"])
        click.echo(
            f"token {r['name']!r} ({r['scope']}) created; it is shown only now. Use it as "
            "'Authorization: Bearer <token>'."
            + (f" It expires at {r['expires_at']}." if r["expires_at"] else ""),
            err=True,
        )

    emit(
        {"name": name, "token": plaintext, "scope": scope, "expires_at": expires_at},
        as_json,
        human,
    )


@token.command("revoke")
@click.argument("name")
@json_option
def token_revoke(name: str, as_json: bool) -> None:
    """Revoke the write token NAME (requests with it then answer 403)."""
    from normfree.api.services import revoke_token

    if not revoke_token(_repository(), name):
        fail(f"no active token named {name!r}", as_json, code=1)
    emit({"name": name, "revoked": True}, as_json, lambda r: click.echo(f"revoked {r['name']!r}"))


@token.command("list")
@json_option
def token_list(as_json: bool) -> None:
    """List tokens by name (never their values)."""
    from normfree.api.services import list_tokens

    rows = list_tokens(_repository())

    def human(items: list[dict[str, object]]) -> None:
        if not items:
            click.echo("no tokens; create one with `normfree token create NAME`")
        for r in items:
            state = "revoked" if r.get("revoked_at") else "active"
            expiry = f"\texpires {r['expires_at']}" if r.get("expires_at") else ""
            click.echo(
                f"{r['name']}\t{r.get('scope')}\t{state}\tcreated {r.get('created_at')}{expiry}"
            )

    emit(rows, as_json, human)
