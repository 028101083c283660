"""Leaderboards: candidates ranked per proxy over seeds, with confidence intervals."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from normfree.api import cache, export, reads
from normfree.api.deps import (
    FormatQuery,
    GroupQuery,
    PropertyQuery,
    Reader,
    StateDep,
    StudyIdQuery,
)
from normfree.api.errors import ErrorBody
from normfree.api.schemas import LeaderboardPublic

router = APIRouter(prefix="/leaderboards", tags=["leaderboards"])


@router.get(
    "/{proxy}",
    response_model=LeaderboardPublic,
    responses={404: {"model": ErrorBody}, **export.FILE_RESPONSES},
)
async def get_leaderboard(
    request: Request,
    state: StateDep,
    _reader: Reader,
    proxy: Annotated[str, Path(max_length=100, examples=["vit-screen"])],
    group: GroupQuery = None,
    properties: PropertyQuery = None,
    study_id: StudyIdQuery = None,
    archived: Annotated[
        bool, Query(description="Count archived studies and arms too (left out by default).")
    ] = False,
    format: FormatQuery = "json",
) -> Response:
    """Arms of ``proxy`` ranked by the pessimistic end of their 95% t interval (one lucky seed
    cannot top the board), with diverged counts, Welch's test against the best, and the paired
    difference to LayerNorm on shared seeds.

    Built from per-arm summaries and cached until one of the proxy's trials finishes; sends an
    ETag (``If-None-Match`` answers 304). ``format=csv|parquet``: the rows as a table, one
    arm a row (``api.export``)."""
    if format != "json":
        rows = await run_in_threadpool(
            export.leaderboard_rows,
            state,
            proxy,
            group=group,
            properties=properties,
            study_id=study_id,
            archived=archived,
        )
        return export.respond(rows, format, f"leaderboard-{proxy}")

    async def current_key() -> reads.Key:
        return await reads.small_read(
            state, reads.leaderboard_key, state, proxy, group, properties, study_id, archived
        )

    key = await current_key()

    def build() -> cache.Cached:
        board = reads.leaderboard(
            state,
            proxy,
            group=group,
            properties=properties,
            study_id=study_id,
            key=key,
            archived=archived,
        )
        return cache.json_body(board)

    return await cache.serve(request, state.cache, key, build, rekey=current_key)
