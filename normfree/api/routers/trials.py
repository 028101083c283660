"""Trials: one training run with its learning curves and per-layer diagnostics."""

from __future__ import annotations

import logging
import re

from fastapi import APIRouter, Request, Response
from starlette.types import Scope

from normfree.api import cache, reads, security, services
from normfree.api.deps import MAX_ID, IdPath, Reader, StateDep
from normfree.api.errors import ErrorBody
from normfree.api.schemas import TrialPublic

log = logging.getLogger(__name__)
router = APIRouter(prefix="/trials", tags=["trials"])


@router.get("/{trial_id}", response_model=TrialPublic, responses={404: {"model": ErrorBody}})
async def get_trial(
    request: Request, state: StateDep, _reader: Reader, trial_id: IdPath
) -> Response:
    """A trial's config, status, final metrics, per-epoch curves and per-layer diagnostics.

    Sends an ETag that changes with every write to the trial (``If-None-Match`` answers 304).
    A failed trial's ``error`` is one line with a reference id; a request with a valid token
    gets the full text (traceback included) after it."""
    return await trial_answer(request, state, trial_id)


async def trial_answer(request: Request, state: services.ServiceState, trial_id: int) -> Response:
    """:func:`get_trial`'s answer, also reached directly by the fast lane (:func:`direct`)."""
    answered = await _from_document_on_loop(request, state, trial_id)
    if answered is not None:
        return answered

    def answer() -> Response:
        # one transaction for the key and the trial, where small reads run (on the loop for
        # SQLite, else in the thread pool): a trial is rarely read twice, so its body is built
        # each time and never stored; the token check (a database read when a token is sent)
        # runs here too
        private = security.is_token_holder(request)
        key, trial = reads.trial_read(state, trial_id)
        if private:  # a different body: a different ETag
            key = (("private", key[0]), key[1])
        return cache.respond(
            request,
            state.cache,
            key,
            lambda: cache.json_body(
                services.trial_public(trial, private=private, finite_already=True)
            ),
            store=False,
        )

    return await reads.small_read(state, answer)


async def _from_document_on_loop(
    request: Request, state: services.ServiceState, trial_id: int
) -> Response | None:
    """On PostgreSQL, a finished trial for a client without a token: its stored document read
    on the event loop (``storage.async_reads``) and answered there, with the key and body the
    thread-pool path gives it. None (that path answers) for anything else: SQLite (already on
    the loop), a token holder (a private body), a trial without a current document, an error.
    """
    documents = state.trial_documents
    identity = reads.known_identity(state)
    if documents is None or identity is None or security.token_of(request) is not None:
        return None
    try:
        _found, t = await documents.stored_trial_detail(trial_id)
    except Exception:  # an optimisation: the usual path reads it (and reports what is wrong)
        log.debug("trial %s: no document from the async reader", trial_id, exc_info=True)
        return None
    if t is None:
        return None
    return cache.respond(
        request,
        state.cache,
        reads.trial_key(trial_id, t, identity),
        lambda: cache.json_body(services.trial_public(t, private=False, finite_already=True)),
        store=False,
    )


# The fast lane's direct route (``api.fastlane``), relative to the API's prefix.
DIRECT_PATH = re.compile(router.prefix + r"/([1-9][0-9]{0,9})")


async def direct(scope: Scope, match: re.Match[str]) -> Response | None:
    """An anonymous ``GET`` of one trial, answered before routing: the same answer as
    :func:`get_trial` (the lane only lets through requests the route answers publicly). None
    for anything else (no such trial, an id out of range, an error): the app then answers it."""
    trial_id = int(match[1])
    if trial_id > MAX_ID:
        return None
    try:
        return await trial_answer(Request(scope), scope["app"].state.services, trial_id)
    except Exception:  # a 404, a database error: the app answers, with its error handlers
        return None
