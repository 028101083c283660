"""Reference sets: published at-scale results, listed, shown, and imported with a token."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import PlainTextResponse, Response
from starlette.concurrency import run_in_threadpool

from normfree.api import cache, fidelity, offload, reads, security
from normfree.api.deps import DryRunQuery, Reader, StateDep, WritePrincipal
from normfree.api.errors import ErrorBody, write_errors
from normfree.api.schemas import (
    ReferenceSetDeleted,
    ReferenceSetDetail,
    ReferenceSetList,
    ReferenceSetPublic,
)

router = APIRouter(prefix="/references", tags=["references"])

NamePath = Annotated[str, Path(max_length=100, examples=["published"])]

_IMPORT_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["name", "source", "rows"],
                    "properties": {
                        "name": {"type": "string", "maxLength": 100},
                        "title": {"type": "string", "maxLength": 300},
                        "source": {"type": "string", "maxLength": 4000},
                        "description": {"type": "string", "maxLength": 4000},
                        "rows": {"type": "array", "maxItems": 5000, "items": {"type": "object"}},
                    },
                }
            },
            "text/csv": {"schema": {"type": "string"}},
        },
    }
}


@router.get("", response_model=ReferenceSetList)
async def list_references(request: Request, state: StateDep, _reader: Reader) -> Response:
    """Every stored reference set (the built-in ``published`` set first). Cached until a set
    is stored or deleted; sends an ETag (``If-None-Match`` answers 304)."""
    key = await reads.small_read(state, reads.references_key, state)
    return await cache.serve(
        request, state.cache, key, lambda: cache.json_body(fidelity.list_references(state))
    )


@router.get(
    "/{name}",
    response_model=ReferenceSetDetail,
    responses={404: {"model": ErrorBody}, 200: {"content": {"text/csv": {}}}},
)
def get_reference(
    name: NamePath,
    state: StateDep,
    _reader: Reader,
    format: Annotated[Literal["json", "csv"], Query()] = "json",
) -> ReferenceSetDetail | Response:
    """One set with its rows; ``?format=csv`` answers the import format."""
    if format == "csv":
        return PlainTextResponse(fidelity.reference_csv(state, name), media_type="text/csv")
    return fidelity.get_reference(state, name)


@router.post(
    "",
    response_model=ReferenceSetPublic,
    status_code=201,
    openapi_extra=_IMPORT_BODY,
    responses={
        **write_errors(
            "Unknown, revoked or read-only token, or replacing another token's set (only its "
            "importer or an admin token may)."
        ),
        409: {"model": ErrorBody, "description": "A set of that name exists (use replace)."},
        415: {"model": ErrorBody, "description": "Neither JSON nor CSV."},
        422: {"model": ErrorBody, "description": "Rows refused, each with its reason."},
    },
)
async def import_reference(
    request: Request,
    state: StateDep,
    who: WritePrincipal,
    name: Annotated[str | None, Query(max_length=100, description="CSV imports: the name")] = None,
    title: Annotated[str, Query(max_length=300)] = "",
    source: Annotated[
        str | None, Query(max_length=4000, description="CSV imports: the citation")
    ] = None,
    replace: bool = False,
) -> ReferenceSetPublic:
    """Import a set: JSON (``{name, title, source, rows: [...]}``) or CSV rows (columns
    setting, family, metric, direction, resolution, function, shift, alpha, value, value_low,
    value_high, failed, note). Cells are resolved through the catalog; one bad row refuses the
    whole set, and every bad row is named."""
    body = await request.body()
    content_type = request.headers.get("content-type", "").lower()
    # every row's cells are resolved through the catalog (formula parses): in a worker process
    ref, keys = await offload.pool(request).call(
        security.queue_key(request, who.name),
        "normfree.api.fidelity:parse_reference_keyed",
        body,
        content_type,
        name,
        title,
        source,
        what="the reference set",
    )
    return await run_in_threadpool(
        fidelity.store_reference, state, ref, who=who, replace=replace, cell_keys=keys
    )


@router.delete(
    "/{name}",
    response_model=ReferenceSetDeleted,
    responses={
        **write_errors("Unknown, revoked or read-only token, or another token's set."),
        404: {"model": ErrorBody},
        409: {"model": ErrorBody, "description": "The built-in set cannot be deleted."},
    },
)
def delete_reference(
    name: NamePath, state: StateDep, who: WritePrincipal, dry_run: DryRunQuery = False
) -> ReferenceSetDeleted:
    """Delete a set with its rows: only the token that imported it, or an admin token, may.
    ``?dry_run=true`` makes every check and says how many rows would go, removing nothing."""
    rows = fidelity.delete_reference(state, name, who, dry_run=dry_run)
    return ReferenceSetDeleted(name=name, deleted=not dry_run, dry_run=dry_run, rows=rows)
