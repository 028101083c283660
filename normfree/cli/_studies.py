"""What the study, leaderboard, cluster and demo commands share: the ``--db`` option, storage
opened from it, the leaderboard read, and the driver run with a live progress bar."""

from __future__ import annotations

import logging
import threading
from typing import Any

import click

from normfree.cli._output import fail

log = logging.getLogger(__name__)

db_option = click.option(
    "--db",
    "database_url",
    default=None,
    metavar="URL",
    help="Database URL (default: NORMFREE_DATABASE_URL, else sqlite:///normfree.db).",
)


class NoDatabase(Exception):
    """The database named for a lookup of stored candidates cannot be asked."""


def stored_repo(database_url: str | None) -> Any:
    """The repository of the database (``--db``) for a lookup of stored candidates;
    :class:`NoDatabase` when there is none to ask (unreachable, or a SQLite file that does not
    exist: a lookup creates no database)."""
    from pathlib import Path

    settings = settings_for(database_url)
    path = _sqlite_file(settings.database_url)
    if path is not None and not Path(path).exists():
        raise NoDatabase(f"no database file {path}")
    try:
        return open_store(settings).repo
    except Exception as exc:
        raise NoDatabase(type(exc).__name__) from exc


def _sqlite_file(url: str) -> str | None:
    """The file of a SQLite URL (``sqlite:///rel.db``, ``sqlite:////abs.db``), None for any
    other database or an in-memory one. Read from the text: ``candidates list`` imports no
    SQLAlchemy when there is no database file to open (tests/cli/test_quick.py)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.split("+")[0] != "sqlite" or not rest.startswith("/"):
        return None
    path = rest[1:].split("?", 1)[0]
    return path if path and path != ":memory:" else None


def bake_stored(text: str, database_url: str | None) -> tuple[Any, str | None]:
    """``resolver.bake(text, stored)`` with the stored candidates of the database (``--db``),
    as a study resolves names: (candidate, definition). ``ExpressionError`` for a name it does
    not hold either; :class:`NoDatabase` when there is none to ask (:func:`stored_repo`). One
    home for ``train --norm`` and ``candidates show``."""
    from normfree.search_space import ExpressionError, resolver
    from normfree.workers.validation import stored_names

    stored = stored_names(stored_repo(database_url))
    try:
        return resolver.bake(text, stored)
    except ExpressionError:
        raise
    except Exception as exc:  # the lookup itself failed (the database went away)
        raise NoDatabase(type(exc).__name__) from exc


def settings_for(database_url: str | None) -> Any:
    from normfree.settings import get_settings

    base = get_settings()
    return base.model_copy(update={"database_url": database_url}) if database_url else base


def open_store(settings: Any) -> Any:
    from normfree import storage

    return storage.open(settings)


def board(store: Any, proxy: str, **kw: Any) -> list[dict[str, Any]]:
    """The leaderboard, without scipy's precision warning for seeds that agree exactly."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=RuntimeWarning, message=".*[Pp]recision loss")
        return store.repo.leaderboard(proxy, **kw)


def counts_line(counts: dict[str, int]) -> str:
    return "  ".join(f"{k.lower()} {v}" for k, v in counts.items() if v)


class EarlyJoin:
    """Joining the cluster a running ``normfree serve`` advertises, on a thread, while the
    command creates its study: connecting (Ray's import, the driver's core worker) then costs
    no time before the first trial. Only for joining: starting a cluster of one's own is
    seconds of work a refused study would have to wait for and undo."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self._executor: Any = None
        self._thread = threading.Thread(target=self._join, name="normfree-join", daemon=True)
        self._thread.start()

    def _join(self) -> None:
        from normfree.workers.execution import RayExecutor

        try:
            self._executor = RayExecutor(self.settings).start()
        except Exception:  # the driver then starts (or joins) as it would have
            log.warning("could not join the local cluster ahead of the study", exc_info=True)

    def executor(self) -> Any:
        """The started executor once the join has ended, or None when it failed."""
        self._thread.join()
        return self._executor

    def discard(self) -> None:
        """End the connection (the study was refused): the cluster stays up."""
        executor = self.executor()
        if executor is not None:
            executor.shutdown()


def join_early(settings: Any) -> EarlyJoin | None:
    """An :class:`EarlyJoin` when a shared local cluster runs (``workers.localray.running``)
    and this command may join it; else None."""
    if settings.ray_address or not settings.share_local_cluster:
        return None
    from normfree.workers import localray

    return EarlyJoin(settings) if localray.running() is not None else None


def run_driver(
    study_id: int, settings: Any, as_json: bool, parallel: int | None, executor: Any = None
) -> dict:
    """Run the study's driver here, with a rich progress bar unless ``--json``; ``executor``:
    one already started (:class:`EarlyJoin`), else the driver starts its own.

    SIGTERM or Ctrl-C stops it cleanly (see :mod:`normfree.cli._signals`): the driver hands its
    running trials back, the embedded Ray is stopped with all its processes, and the command
    exits 130 (SIGINT) or 143 (SIGTERM) saying how to carry on.
    """
    import signal

    from normfree.cli._signals import interrupt_on_signals
    from normfree.workers.driver import StudyDriver

    driver: Any = None
    fired: list[int] = []
    try:
        with interrupt_on_signals() as fired:
            try:
                driver = StudyDriver(
                    study_id, settings=settings, max_parallel=parallel, executor=executor
                )
                summary = driver.run() if as_json else _run_with_progress(driver)
            finally:
                started = driver.executor if driver is not None else executor
                if started is not None:
                    started.shutdown()  # Ray and every process it started
    except KeyboardInterrupt:
        signum = fired[0] if fired else signal.SIGINT
        fail(
            f"study {study_id} interrupted by {signal.Signals(signum).name}: its finished "
            "trials are kept and its running ones were handed back; carry on with "
            f"`normfree study run {study_id}`",
            as_json,
            code=128 + signum,
            study_id=study_id,
            status="interrupted",
        )
    driver_summary = {
        "study_id": summary.study_id,
        "status": summary.status,
        "dispatched": summary.dispatched,
        "retried": summary.retried,
        "requeued_expired": summary.requeued_expired,
        "counts": summary.counts,
        "wall_s": round(summary.wall_s, 2),
        # started (its own Ray), joined <address> (a running `normfree serve`'s) or address <a>
        "cluster": getattr(driver.executor, "cluster", None),
    }
    return driver_summary


def _run_with_progress(driver: Any) -> Any:
    """The driver's run under a rich progress bar; returns its summary."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn(f"study {driver.study_id}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[counts]}"),
    ) as bar:
        task = bar.add_task("trials", total=None, counts="starting Ray ...")

        def progress(counts: dict[str, int]) -> None:
            total = sum(counts.values())
            done = total - counts.get("WAITING", 0) - counts.get("RUNNING", 0)
            bar.update(task, total=total, completed=done, counts=counts_line(counts))

        driver.on_progress = progress
        return driver.run()


def exit_if_failed(study_id: int, status: str, rows: list[dict[str, Any]], as_json: bool) -> None:
    """Exit 1 when the study ended ``failed`` (nothing trained: ``workers.lifecycle.outcome``),
    saying why per arm on stderr (the ``--json`` output already carries the same rows)."""
    if status != "failed":
        return
    import sys

    from normfree.cli.leaderboard import failure_lines

    lines = failure_lines(rows)
    if not as_json:
        click.echo(f"error: study {study_id} failed: no trial completed", err=True)
        for line in lines:
            click.echo(f"  {line}", err=True)
    sys.exit(1)
