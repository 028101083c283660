"""Screening a function: where does it rank among the paper's 16 search candidates?

``normfree screen FUNCTION`` and ``POST /api/screens`` ask this on the default screens
(``proxies.DEFAULT_SCREENS``: one ViT, one DiT), the way the paper's search asked it: one
options study per screen of the 16 candidates plus the function, with the published operator
(y = gamma f(alpha x + s) + beta, ``shift=scalar``), beside LayerNorm and the identity (no
norm), on the preset's default seeds, epochs and data. This module is the one home of that
study's shape (:func:`screen_spec`), of finding an earlier screen of the same function to
reuse (:func:`find_screen`) and of reading the placement (:func:`placement`); the CLI and the
API only call it.

Cost: the study's trials of the 16 and the baselines have the same trial keys in every screen
of every function, so once a database holds them (a first screen, or a user's options study
of the 16 with ``--option shift=scalar``) a new function's screen trains only that function's
seeds (``storage.trials.reuse_finished``, under the same trainer code).

A placement is not a verdict by itself, and says so: beside the rank it carries the board's
split-seed rank reliability (does the order reproduce itself on fresh seeds?), the screen's
fidelity headline (does its order agree with the published results?) and the board's caveats.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from normfree.specs import StudySpec

SCREEN_BASELINES: tuple[str, ...] = ("layernorm", "identity")
# The operator of the paper's 16-candidate search (science.md section 2: u = alpha x + s).
SCREEN_OPTIONS: dict[str, list[Any]] = {"shift": ["scalar"]}
# Studies in these statuses are not reused: they ended without their trials or were stopped.
_DEAD = ("failed", "cancelled", "creating")
# A difference below this many pooled seed stds is not read as a rank (README: Fidelity).
NOISE_STDS = 2.0


def screen_spec(
    function: str, proxy: str, *, seeds: int = 3, epochs: int | None = None
) -> StudySpec:
    """The study that places ``function`` among the 16 on ``proxy`` (see the module docstring).

    The name is left out of what makes two screens the same (:func:`find_screen`)."""
    from normfree.search_space.catalog import SEARCH16

    functions = list(dict.fromkeys([*SEARCH16, function]))
    return StudySpec(
        kind="options",
        name=f"screen {function[:150]}",
        proxy=proxy,
        seeds=seeds,
        functions=functions,
        options={k: list(v) for k, v in SCREEN_OPTIONS.items()},
        baselines=list(SCREEN_BASELINES),
        epochs=epochs,
    )


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    drop = ("name",)
    return {k: v for k, v in a.items() if k not in drop} == {
        k: v for k, v in b.items() if k not in drop
    }


def find_screen(repo: Any, spec: StudySpec) -> int | None:
    """The newest study whose spec is ``spec`` (validated, names aside) and that is not failed,
    cancelled or half created: running a screen again reuses it instead of planning a twin."""
    want = spec.model_dump(mode="json")
    for row in repo.list_studies():  # newest first
        stored = row.get("spec")
        if row["status"] in _DEAD or not isinstance(stored, Mapping):
            continue
        if row["proxy"] == spec.proxy and _same(stored, want):
            return int(row["id"])
    return None


def _row_label(row: Mapping[str, Any]) -> str:
    from normfree.storage.leaderboard import arm_text, row_options

    return arm_text(row["candidate"], options=row_options(row))


def placement(
    rows: Sequence[Mapping[str, Any]],
    function: str,
    proxy: str,
    *,
    fidelity_headline: str | None = None,
) -> dict[str, Any]:
    """Where ``function`` sits on a screen's board (``storage.leaderboard`` rows of its study).

    Keys: ``function``, ``proxy``, ``objective``, ``direction``, ``found`` (the function has a
    row), ``rank`` / ``ranked_arms`` (its place among every ranked arm), ``among_16`` (its place
    among itself and the 16: 1 = above all of them), ``beats`` / ``trails`` / ``within_noise``
    (the 16 it beats, trails, by more than ``NOISE_STDS`` pooled seed stds, and the others), its
    ``mean``, ``std``, ``n``, ``failed_seeds``, ``vs_layernorm``, ``reliability`` (the board's,
    with its caption in ``text``), ``fidelity`` (the screen's headline), ``caveats`` (notes in
    words) and ``text`` (one paragraph for people)."""
    from normfree.fidelity.caveats import board_caveats
    from normfree.fidelity.reliability import board_reliability
    from normfree.search_space.catalog import SEARCH16

    rel = board_reliability(rows)
    labelled = [{**r, "label": _row_label(r)} for r in rows]
    cav = board_caveats(proxy, labelled)
    mine = next((r for r in labelled if r["candidate"] == function), None)
    direction = next((r["direction"] for r in rows if r.get("direction")), "maximize")
    objective = next((r["objective"] for r in rows if r.get("objective")), None)
    out: dict[str, Any] = {
        "function": function,
        "proxy": proxy,
        "objective": objective,
        "direction": direction,
        "found": mine is not None,
        "reliability": {**rel.as_dict(), "text": rel.text()},
        "fidelity": fidelity_headline,
        "caveats": list(cav["notes"]),
    }
    if mine is None or not mine.get("ranked"):
        why = "no trial yet" if mine is None else (mine.get("unranked_reason") or "no seed ended")
        out.update(rank=None, text=f"{function} on {proxy}: not ranked ({why}).")
        return out
    sign = 1.0 if direction == "maximize" else -1.0
    ranked = [r for r in labelled if r.get("ranked")]
    sixteen = [r for r in labelled if r["candidate"] in SEARCH16 and r["candidate"] != function]
    stds = [r["std"] for r in ranked if r.get("std") is not None]
    noise = NOISE_STDS * (sum(s * s for s in stds) / len(stds)) ** 0.5 if stds else 0.0
    beats, trails, close = [], [], []
    for r in sixteen:
        if not r.get("ranked"):
            beats.append(r["label"])  # failed to train: below every value
            continue
        diff = sign * (mine["mean"] - r["mean"])
        (close if abs(diff) <= noise else beats if diff > 0 else trails).append(r["label"])
    better_16 = sum(1 for r in sixteen if r.get("ranked") and sign * (r["mean"] - mine["mean"]) > 0)
    out.update(
        rank=mine["rank"],
        ranked_arms=len(ranked),
        among_16=better_16 + 1,
        of=len(sixteen) + 1,
        beats=beats,
        trails=trails,
        within_noise=close,
        noise=noise,
        mean=mine["mean"],
        std=mine.get("std"),
        n=mine["n"],
        failed_seeds=int(mine.get("n_diverged", 0)) + int(mine.get("n_failed", 0)),
        vs_layernorm=mine.get("vs_layernorm"),
    )
    ln = mine.get("vs_layernorm") or {}
    parts = [
        f"{mine['label']} on {proxy}: {out['among_16']} of {out['of']} among the 16 search "
        f"candidates by mean (rank {mine['rank']} of {len(ranked)} arms with the baselines "
        "by the pessimistic end of each 95% interval, as the board ranks), "
        f"{objective} {mine['mean']:.4g} over {mine['n']} seeds",
        f"it beats {len(beats)} and trails {len(trails)} of the 16 by more than "
        f"{NOISE_STDS:g} seed stds ({noise:.3g}); {len(close)} are within that",
    ]
    if ln.get("mean_diff") is not None:
        parts.append(f"paired difference to LayerNorm {ln['mean_diff']:+.4g}")
    parts.append(rel.text())
    if fidelity_headline:
        parts.append(fidelity_headline)
    out["text"] = "; ".join(parts) + "."
    return out


def screen_board(store: Any, study_id: int, proxy: str) -> list[dict[str, Any]]:
    """The screen study's board (its own trials, reused ones included)."""
    import warnings

    with warnings.catch_warnings():  # scipy's precision note for seeds that agree exactly
        warnings.filterwarnings("ignore", category=RuntimeWarning)
        return store.repo.leaderboard(proxy, study_id=study_id)


def fidelity_line(db: Any, proxy: str) -> str | None:
    """The screen's own fidelity headline (its preset's trials against ``published``)."""
    import warnings

    from normfree.fidelity.report import headline
    from normfree.workers.fidelity import FidelityError, fidelity_report

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return headline(fidelity_report(db, proxy=proxy, n_boot=0))
    except FidelityError:
        return None


__all__ = [
    "NOISE_STDS",
    "SCREEN_BASELINES",
    "SCREEN_OPTIONS",
    "fidelity_line",
    "find_screen",
    "placement",
    "screen_board",
    "screen_spec",
]
