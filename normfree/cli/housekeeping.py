"""Housekeeping from the command line: ``normfree study tag|note|archive|delete`` and
``normfree candidates archive|delete``.

The CLI holds the database itself (``--db``), so no token is asked, as for every other study
command. A delete first prints what it removes (``storage`` counts it) and asks; ``--yes``
skips the question, ``--dry-run`` only prints. With ``--json`` there is no question: pass
``--yes`` or ``--dry-run``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from normfree.cli._output import emit, fail, json_option
from normfree.cli._studies import db_option, open_store, settings_for
from normfree.cli.candidates import candidates
from normfree.cli.study import study

T = TypeVar("T")


def _store(database_url: str | None) -> Any:
    return open_store(settings_for(database_url))


def _edit_study(study_id: int, as_json: bool, edit: Callable[[], T]) -> T:
    """A tag or note edit: an unknown study exits 1, a refused tag or note (``ValueError``,
    the message says which rule) exits 2 as any bad input does."""
    try:
        return edit()
    except KeyError:
        fail(f"no study {study_id}", as_json, code=1)
    except ValueError as exc:
        fail(str(exc), as_json)


def _removal_lines(r: dict[str, Any]) -> list[str]:
    """A deletion preview in words, one line per kind of row."""
    what = (
        f"arm {r['arm_key']} of study {r['study_id']}"
        if r.get("arm_key")
        else (f"study {r['study_id']} ({r['status']})")
    )
    lines = [
        f"deleting {what} removes:",
        f"  {r['trials']} trials, {r['curve_points']} curve points, "
        f"{r['diagnostics']} diagnostics rows",
        f"  {r['leaderboard_arms']} leaderboard arm summaries on "
        f"{', '.join(r['proxies']) or 'no proxy'} (folded again without them)",
    ]
    if r.get("optuna_study"):
        lines.append(f"  Optuna study {r['optuna_study']}")
    elif r.get("arm_key"):
        lines.append("  (the study's Optuna history stays: the sampler saw these trials)")
    if r.get("blocked"):
        lines.append(f"refused now: {r['blocked']}")
    return lines


def _confirm(preview: Any, lines: list[str], yes: bool, dry_run: bool, as_json: bool) -> bool:
    """Print the preview; whether to go on (False: it was only a dry run)."""
    if dry_run:
        emit(
            {"dry_run": True, "removes": preview}, as_json, lambda _r: click.echo("\n".join(lines))
        )
        return False
    if as_json and not yes:
        fail("--json cannot ask: pass --yes to delete, or --dry-run to see what it removes",
             as_json)  # fmt: skip
    if not as_json:
        click.echo("\n".join(lines))
    if not yes:
        try:
            sure = click.confirm("delete?", default=False)
        except click.Abort:  # no answer (no terminal, or Ctrl-C): no
            sure = False
        if not sure:
            fail("nothing deleted", as_json, code=1)
    return True


@study.command("tag")
@click.argument("study_id", type=int)
@click.argument("tags", nargs=-1)
@click.option("--remove", "remove", multiple=True, help="A tag to remove (repeatable).")
@db_option
@json_option
def study_tag(
    study_id: int, tags: tuple[str, ...], remove: tuple[str, ...], database_url: str | None,
    as_json: bool,
) -> None:  # fmt: skip
    """Add TAGS to study STUDY_ID (and remove --remove ones); prints its tags. `normfree study
    list --tag T` lists the studies with a tag."""
    store = _store(database_url)
    held = _edit_study(study_id, as_json, lambda: store.repo.tag_study(study_id, tags, remove))
    emit(
        {"study_id": study_id, "tags": held},
        as_json,
        lambda r: click.echo(f"study {study_id}: {', '.join(r['tags']) or 'no tags'}"),
    )


@study.command("note")
@click.argument("study_id", type=int)
@click.argument("text")
@db_option
@json_option
def study_note(study_id: int, text: str, database_url: str | None, as_json: bool) -> None:
    """Set the note of study STUDY_ID to TEXT ("" clears it); shown on its page and in lists."""
    store = _store(database_url)
    note = _edit_study(study_id, as_json, lambda: store.repo.note_study(study_id, text))
    emit(
        {"study_id": study_id, "note": note},
        as_json,
        lambda r: click.echo(
            f"study {study_id}: " + (f"note {r['note']!r}" if r["note"] else "no note")
        ),
    )


@study.command("archive")
@click.argument("study_id", type=int)
@click.option("--arm", "arm_key", default=None, help="Archive only this arm (a cell's arm key).")
@click.option("--restore", is_flag=True, help="Put it back on lists and leaderboards.")
@db_option
@json_option
def study_archive(
    study_id: int, arm_key: str | None, restore: bool, database_url: str | None, as_json: bool
) -> None:
    """Archive a finished study, or one arm of a study: it leaves lists and leaderboards,
    every row kept (--restore undoes it)."""
    from normfree.storage.studies import StudyBusy

    store = _store(database_url)
    archived = not restore
    try:
        if arm_key:
            n = store.repo.archive_arm(study_id, arm_key, archived)
            out: dict[str, Any] = {"study_id": study_id, "arm_key": arm_key, "trials": n}
        else:
            store.repo.archive_study(study_id, archived)
            out = {"study_id": study_id}
    except KeyError as exc:
        fail(str(exc).strip("'\""), as_json, code=1)
    except StudyBusy as exc:
        fail(str(exc), as_json, code=1)
    out["archived"] = archived
    what = f"arm {arm_key} of study {study_id}" if arm_key else f"study {study_id}"
    emit(out, as_json, lambda r: click.echo(f"{what} {'archived' if archived else 'restored'}"))


@study.command("delete")
@click.argument("study_id", type=int)
@click.option("--arm", "arm_key", default=None, help="Delete only this arm (a cell's arm key).")
@click.option("--yes", is_flag=True, help="Do not ask.")
@click.option("--dry-run", is_flag=True, help="Only print what it would remove.")
@db_option
@json_option
def study_delete(
    study_id: int, arm_key: str | None, yes: bool, dry_run: bool, database_url: str | None,
    as_json: bool,
) -> None:  # fmt: skip
    """Delete a finished study (or one arm of it) with its trials, curves, diagnostics and,
    for a whole study, its Optuna study; prints what it removes first and asks."""
    from normfree.api.services.studies import drop_optuna_study
    from normfree.storage.studies import StudyBusy

    store = _store(database_url)
    try:
        preview = store.repo.study_removal(study_id, arm_key)
    except KeyError as exc:
        fail(str(exc).strip("'\""), as_json, code=1)
    if not _confirm(preview, _removal_lines(preview), yes, dry_run, as_json):
        return
    try:
        if arm_key:
            store.repo.delete_arm(study_id, arm_key)
        else:
            drop_optuna_study(store, store.repo.delete_finished_study(study_id))
    except KeyError as exc:
        fail(str(exc).strip("'\""), as_json, code=1)
    except StudyBusy as exc:
        fail(str(exc), as_json, code=1)
    emit({"deleted": True, "removes": preview}, as_json, lambda _r: click.echo("deleted"))


@candidates.command("archive")
@click.argument("name")
@click.option("--restore", is_flag=True, help="Show it in the candidate list again.")
@db_option
@json_option
def candidates_archive(name: str, restore: bool, database_url: str | None, as_json: bool) -> None:
    """Hide the stored candidate NAME from the candidate list (--restore shows it again);
    studies and leaderboards that ran it are unchanged."""
    store = _store(database_url)
    try:
        row = store.repo.archive_candidate(name, not restore)
    except KeyError:
        fail(f"no stored candidate {name!r}", as_json, code=1)
    out = {"candidate": name, "archived": row["archived_at"] is not None}
    emit(
        out, as_json, lambda r: click.echo(f"{name} {'archived' if r['archived'] else 'restored'}")
    )


@candidates.command("delete")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask.")
@click.option("--dry-run", is_flag=True, help="Only print whether it can be deleted.")
@db_option
@json_option
def candidates_delete(
    name: str, yes: bool, dry_run: bool, database_url: str | None, as_json: bool
) -> None:
    """Delete the stored candidate NAME. One that a study ran is refused (its formula is what
    that study's leaderboard arms show): archive it, or delete those studies first."""
    from normfree.storage.candidates import CandidateInUse

    store = _store(database_url)
    if store.repo.get_candidate(name) is None:
        fail(f"no stored candidate {name!r}", as_json, code=1)
    used = store.repo.candidate_usage(name)
    preview = {"candidate": name, "used_by_studies": used,
               "blocked": str(CandidateInUse(name, used)) if used else None}  # fmt: skip
    lines = [f"deleting candidate {name!r} removes its row"]
    if used:
        lines.append(f"refused now: {preview['blocked']}")
    if not _confirm(preview, lines, yes, dry_run, as_json):
        return
    try:
        store.repo.delete_candidate(name)
    except KeyError:
        fail(f"no stored candidate {name!r}", as_json, code=1)
    except CandidateInUse as exc:
        fail(str(exc), as_json, code=1, used_by_studies=exc.study_ids)
    emit({"deleted": True, "removes": preview}, as_json, lambda _r: click.echo("deleted"))
