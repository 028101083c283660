"""Leaderboards: the storage board with each arm's group and properties (stored, else from the
catalog, analysed off the request path by ``ENRICHER``) and its fidelity line."""

from __future__ import annotations

import functools
import gc
import logging
import threading
from collections.abc import Mapping
from typing import Any

from normfree.api import schemas as S
from normfree.api.enrich import MISSING, Enricher
from normfree.api.errors import ApiError
from normfree.api.services.candidates import _catalog_public, matches_properties
from normfree.api.services.state import ServiceState
from normfree.fidelity.reliability import board_reliability
from normfree.jsonsafe import finite
from normfree.specs import BASELINES
from normfree.workers.errors import public_error

log = logging.getLogger(__name__)


def _enrich(row: Mapping[str, Any], *, wait: bool = True) -> tuple[Any, Any]:
    """A board row's group and properties (``storage.leaderboard.row_group``, as the CLI files
    them), catalog analyses through ``ENRICHER``.

    ``wait=False`` takes only what ``ENRICHER`` has analysed and queues the rest.
    """
    from normfree.storage.leaderboard import row_group

    if wait:
        return row_group(row, ENRICHER.get)

    def known(name: str) -> Any:
        info = ENRICHER.peek(name)
        if info is MISSING:
            ENRICHER.want([name])
            return None
        return info

    return row_group(row, known)


def _catalog_info(name: str) -> tuple[str, dict[str, Any]] | None:
    """(group, properties) of a catalog name or transform call (50-200 ms of sympy): in a
    server, analysed by its background worker process, whose sympy does not hold the GIL the
    server's requests need (issue 27); else here."""
    from normfree.api import offload

    done, info = offload.in_background(
        "normfree.api.services.leaderboards:describe", name, what="the analysis", seconds=60.0
    )
    return info if done else describe(name)


def describe(name: str) -> tuple[str, dict[str, Any]] | None:
    from normfree.search_space import catalog

    return catalog.describe(name)


FREEZE_HEAP = threading.Event()


def freeze_long_lived() -> None:
    """Move every object alive now out of the garbage collector's reach (``gc.freeze``).

    Why: after the warm-up a server holds ~340k long-lived objects (the catalog, sympy's
    caches, the analyses), and every full collection walked them all: 160 ms with the GIL held,
    which every request in flight waited for (the p99 of the cached reads at 32 clients,
    bench/results/read_scale.md). Frozen, a full collection scans only what requests allocate.
    Called after the warm-up and whenever the background analyses finish a batch, in a
    server only (``create_app(freeze_heap=True)``, what ``normfree serve`` builds): what is
    frozen is never collected, right for a server's catalog, wrong for a test process that
    builds an app per test.
    """
    global _FROZEN_ONCE
    if FREEZE_HEAP.is_set():
        # one full collection before the first freeze; later (every batch of analyses, the
        # first seconds after a start) only the young generations: a full one walked every
        # unfrozen object with the GIL held, tenths of a second each time the first requests
        # waited for (issue 27), and what survives it young is as long-lived as the rest
        gc.collect() if not _FROZEN_ONCE else gc.collect(1)
        gc.freeze()
        _FROZEN_ONCE = True


_FROZEN_ONCE = False


ENRICHER = Enricher(_catalog_info, on_idle=freeze_long_lived)


def leaderboard(
    state: ServiceState,
    proxy: str,
    *,
    group: str | None = None,
    properties: list[str] | None = None,
    study_id: int | None = None,
    archived: bool = False,
    line: bool = True,
) -> S.LeaderboardPublic:
    """The board of ``proxy``; archived studies and arms count only with ``archived``.
    ``line=False`` leaves the fidelity line out (:func:`with_line` adds it)."""
    from normfree.storage.leaderboard import arm_text, row_options

    extra = {"archived": True} if archived else {}
    rows = finite(state.repo.leaderboard(proxy, study_id=study_id, **extra))
    if not rows and not _known_proxy(proxy):
        from normfree.workers.proxies import PROXIES

        raise ApiError(
            404, "not_found", f"unknown proxy {proxy!r}; choose from {sorted(PROXIES)}", None
        )
    out: list[S.LeaderboardRow] = []
    shown: list[dict[str, Any]] = []
    objective = next((r.get("objective") for r in rows if r.get("objective")), None)
    direction = next((r.get("direction") for r in rows if r.get("direction")), "maximize")
    for r in rows:
        # a filter must see every row's group and properties; a plain board shows what is known
        grp, props = _enrich(r, wait=bool(group or properties))
        if group and grp != group:
            continue
        if properties and not matches_properties(props, properties):
            continue
        label = arm_text(r["candidate"], options=row_options(r))
        shown.append(r)
        out.append(
            S.LeaderboardRow(
                rank=r["rank"],
                ranked=r.get("ranked", True),
                unranked_reason=public_error(r.get("unranked_reason")),
                failure=public_failure(r.get("failure")),
                candidate=label,
                function=r["candidate"],
                arm_key=r.get("arm_key"),
                group=grp,
                properties=props or {},
                n=r.get("n", 0),
                n_diverged=r.get("n_diverged", 0),
                n_failed=r.get("n_failed", 0),
                n_total=r.get("n_trials", 0),
                mean=r.get("mean"),
                std=r.get("std"),
                ci_low=r.get("ci_low"),
                ci_high=r.get("ci_high"),
                is_best=r["rank"] == 1 and r.get("mean") is not None,
                indistinguishable=bool(r.get("indistinguishable_from_best", True)),
                p_vs_best=r.get("p_vs_best"),
                vs_layernorm=r.get("vs_layernorm"),
                unreadable=r.get("unreadable") or [],
            )
        )
    filters = {
        "group": group,
        "property": properties or [],
        "study_id": study_id,
        "archived": archived,
    }
    unreadable: list[str] = []
    fid = _fidelity_line(state, proxy, study_id, unreadable) if line else None
    return S.LeaderboardPublic(
        proxy=proxy,
        objective=objective,
        direction=direction,
        filters={k: v for k, v in filters.items() if v},
        fidelity=fid,
        caveats=_caveats(proxy, out, objective),
        # a live board's interval carries over while few values changed (fidelity.reliability)
        reliability=reliability_public(
            board_reliability(
                shown,
                reuse=(
                    "board",
                    state.db.url,
                    proxy,
                    group,
                    tuple(properties or ()),
                    study_id,
                    archived,
                ),
            )
        ),
        rows=out,
        unreadable=unreadable,
    )


def with_line(
    state: ServiceState, board: S.LeaderboardPublic, study_id: int | None = None
) -> S.LeaderboardPublic:
    """``board`` (built with ``line=False``) with its fidelity line as it stands now: the line
    is computed beside the reads and lands after the board's data moved (``api.lines``), and
    re-ranking 171 arms each time it landed was a second board build per commit of a live
    study (issue 27)."""
    unreadable = [u for u in board.unreadable if u != "fidelity"]
    fid = _fidelity_line(state, board.proxy, study_id, unreadable)
    return board.model_copy(update={"fidelity": fid, "unreadable": unreadable})


def _fidelity_line(
    state: ServiceState, proxy: str, study_id: int | None, unreadable: list[str]
) -> S.FidelitySummary | None:
    """The board's fidelity line, or None (with ``fidelity`` named in ``unreadable`` and the
    exception logged under a reference) when it cannot be built: a line beside the ranking must
    never cost the ranking (the JSON's rows, the page's table)."""
    from normfree.api import lines

    try:  # computed once per version beside the reads (api.lines)
        if study_id is not None:
            return lines.study_line(state, study_id)
        return lines.proxy_line(state, proxy) if _known_proxy(proxy) else None
    except Exception:
        from normfree.workers.errors import new_reference

        log.exception("leaderboard %s: could not build the fidelity line [ref %s]", proxy,
                      new_reference())  # fmt: skip
        unreadable.append("fidelity")
        return None


def reliability_public(rel: Any) -> S.ReliabilityPublic:
    """A :class:`~normfree.fidelity.reliability.Reliability` as the API shows it."""
    return S.ReliabilityPublic(**finite(rel.as_dict()), text=rel.text())


def public_failure(found: Mapping[str, Any] | None) -> S.ArmFailure | None:
    """An arm's failure as the public reads it (hosts masked, ``workers.errors``)."""
    if not found:
        return None
    return S.ArmFailure(
        reason=public_error(found["reason"]) or "", count=found["count"], failed=found["failed"]
    )


def _caveats(proxy: str, rows: list[S.LeaderboardRow], objective: str | None) -> S.BoardCaveats:
    """The caveats of the rows shown (``fidelity.caveats.board_caveats``)."""
    from normfree.fidelity.caveats import board_caveats

    plain = [
        {
            "label": r.candidate,
            "candidate": r.function or r.candidate,
            "n": r.n,
            "mean": r.mean,
            "objective": objective,
            "properties": r.properties,
        }
        for r in rows
    ]
    return S.BoardCaveats(**board_caveats(proxy, plain))


def _known_proxy(proxy: str) -> bool:
    try:
        from normfree.workers.proxies import PROXIES
    except ImportError:
        return True
    return proxy in PROXIES


def proxies_with_results(state: ServiceState) -> list[str]:
    """Proxies that have finished trials, then the registry's others."""
    seen: list[str] = list(state.repo.list_proxies())
    try:
        from normfree.workers.proxies import PROXIES

        seen += [p for p in PROXIES if p not in seen]
    except ImportError:
        pass
    return seen


def warm_up(state: ServiceState | None = None) -> None:
    """Load the catalog and its properties once (the first request would otherwise pay), then
    adopt the analyses stored by earlier starts and queue the analysis of every other function
    with finished trials (``api.enrich``), storing them as they finish."""
    try:
        _catalog_public()
        if state is not None:
            from normfree.storage import analyses, reads
            from normfree.workers.versions import catalog_version

            version = catalog_version()
            stored = analyses.load(state.db, version)
            ENRICHER.attach(stored, functools.partial(analyses.save, state.db, version))
            with state.db.read() as conn:
                names = sorted({c for _p, c in reads.arm_candidates(conn)})
            ENRICHER.want(n for n in names if n not in BASELINES)
    except Exception:  # a warm-up failure shows up again, with its reason, in the request
        log.warning("catalog warm-up failed", exc_info=True)
    freeze_long_lived()
