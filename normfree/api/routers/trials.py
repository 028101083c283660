"""Trials: one training run with its learning curves and per-layer diagnostics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from normfree.api import cache, reads, security, services
from normfree.api.deps import IdPath, Reader, StateDep
from normfree.api.errors import ErrorBody
from normfree.api.schemas import TrialPublic

router = APIRouter(prefix="/trials", tags=["trials"])


@router.get("/{trial_id}", response_model=TrialPublic, responses={404: {"model": ErrorBody}})
async def get_trial(
    request: Request, state: StateDep, _reader: Reader, trial_id: IdPath
) -> Response:
    """A trial's config, status, final metrics, per-epoch curves and per-layer diagnostics.

    Sends an ETag that changes with every write to the trial (``If-None-Match`` answers 304).
    A failed trial's ``error`` is one line with a reference id; a request with a valid token
    gets the full text (traceback included) after it."""

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
            lambda: cache.json_body(services.trial_public(trial, private=private)),
            store=False,
        )

    return await reads.small_read(state, answer)
