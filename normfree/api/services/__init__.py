"""What the API does, independent of HTTP: the REST routers and the dashboard pages both call this.

Keeping the logic here (not in routers) is what lets the submit form and ``POST /api/candidates``
share one code path, and lets the CLI's ``token`` commands reuse the same storage handle.
Functions take a :class:`ServiceState` (settings, storage, the background runner) and return
the public schemas of :mod:`normfree.api.schemas`; they raise :class:`ApiError` for anything the
client must fix. One module per resource; storage does every query (``storage.reads`` and the
repository), so nothing here writes SQL.

- ``state``: ``ServiceState`` and ``open_repository``
- ``candidates``: the catalog's public rows, submissions, prescreens, property filters
- ``leaderboards``: boards with groups and properties filled in (``ENRICHER``), warm-up
- ``studies``: create, list, cells, trial pages, pause/resume/cancel (``workers.lifecycle``)
- ``trials``: one trial
- ``screens``: a function placed among the 16 search candidates (``POST /api/screens``)
- ``housekeeping``: archive or delete studies, arms and stored candidates (a preview first);
  tags and notes on studies
- ``tokens``: write tokens
"""

from normfree.api.enrich import MISSING
from normfree.api.services.candidates import (
    PLOT_RANGE,
    PRESCREEN_PROXY,
    _catalog_public,
    _resolve_cached,
    cached_prescreen,
    candidate_dict,
    candidate_plot,
    check_submission_name,
    find_duplicate,
    get_candidate_object,
    list_candidates,
    matches_properties,
    parsed_submission,
    prescreens_known,
    property_flags,
    remember_parsed,
    remember_prescreen,
    run_prescreen,
    run_prescreen_uncached,
    submit_candidate,
)
from normfree.api.services.leaderboards import (
    ENRICHER,
    FREEZE_HEAP,
    freeze_long_lived,
    leaderboard,
    proxies_with_results,
    warm_up,
    with_line,
)
from normfree.api.services.state import ServiceState, open_repository
from normfree.api.services.studies import (
    STUDY_PARAMS,
    control_study,
    create_study,
    created,
    delete_study,
    get_study,
    list_studies,
    list_study_trials,
    study_key,
    study_without_cells,
    validate_study,
)
from normfree.api.services.tokens import create_token, list_tokens, revoke_token
from normfree.api.services.trials import trial_public
from normfree.workers.lifecycle import StudyRunner

__all__ = [
    "ENRICHER",
    "FREEZE_HEAP",
    "MISSING",
    "PLOT_RANGE",
    "PRESCREEN_PROXY",
    "STUDY_PARAMS",
    "ServiceState",
    "StudyRunner",
    "_catalog_public",
    "_resolve_cached",
    "cached_prescreen",
    "candidate_dict",
    "candidate_plot",
    "check_submission_name",
    "control_study",
    "create_study",
    "create_token",
    "created",
    "delete_study",
    "find_duplicate",
    "freeze_long_lived",
    "get_candidate_object",
    "get_study",
    "leaderboard",
    "list_candidates",
    "list_studies",
    "list_study_trials",
    "list_tokens",
    "matches_properties",
    "open_repository",
    "parsed_submission",
    "prescreens_known",
    "property_flags",
    "proxies_with_results",
    "remember_parsed",
    "remember_prescreen",
    "revoke_token",
    "run_prescreen",
    "run_prescreen_uncached",
    "study_key",
    "study_without_cells",
    "submit_candidate",
    "trial_public",
    "validate_study",
    "warm_up",
    "with_line",
]
