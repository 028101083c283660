"""The generative study: discover new functions by regularised evolution over expressions.

A ``generate`` study evolves sympy trees from :mod:`normfree.search_space.grammar`:

- **generation 0**: the study's ``functions`` (any name the one resolver accepts: catalog,
  stored user candidates through the study's baked ``definitions``, formulas, transforms) as
  they are, or, without them, ``population`` fresh samples from the grammar that pass the
  filters below.
- **generation g >= 1**: children of the *population* (the ``population`` most recently trained
  candidates: aging, as in regularised evolution) until ``children`` survivors are trained. A
  child is a mutation of a tournament winner (``tournament`` individuals drawn at random, the
  fittest wins), or, with probability ``p_crossover``, the crossover of two winners.

Why regularised evolution and not Optuna driving the choices: the space is a variable-size tree,
which Optuna's samplers can only see as a long list of conditional categoricals where TPE's
density model has nothing to share between similar trees; mutation and crossover act on the
structure directly. Most proposals are rejected before any training (below), and telling Optuna
about each as a failed trial would teach its sampler about our filters, not about the functions.
Aging (the oldest individual leaves, not the worst) is what makes evolution robust to the noisy,
single-setting fitness a proxy trial gives (Real et al., AAAI 2019). Optuna still holds one trial
per trained run (grid-style), so ``optuna-dashboard`` and pruning work as in the other kinds.

Before any training, every proposal passes, in order of cost:

1. **validity**: printed as formula text and parsed back (:func:`grammar.realize`), so it meets
   the very checks a user's formula meets;
2. **dedup**: canonical form and behavioural fingerprint against the catalog (with
   ``same_function``'s tolerance), stored candidates, and every proposal this study has seen;
3. **constraints**: the study's constraint expression over the candidate's properties, e.g.
   ``bounded and monotone`` (:class:`Constraint`, a small safe language, never ``eval``);
4. **prescreen**: the zero-cost check of ``workers.prescreen`` (non-survivors are rejected);
   survivors are ranked by its loss ratio after a few aggressive steps (lower is better).

Only the best ``children`` survivors are trained, on the study's paired seeds, as ordinary
trials of candidates stored with their lineage (parents, mutation, generation): they appear in
leaderboards like catalog candidates. Each generation's decisions (every proposal and its
verdict) are written to the Optuna study's user attributes *before* its trials are inserted; a
restarted driver re-inserts (idempotently) what the last record asked for, and random choices are
seeded by (study seed, generation), so a crash never changes what a study discovers.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from normfree.search_space import Candidate, ExpressionError, catalog
from normfree.search_space.constraints import Constraint, ConstraintError
from normfree.specs import NormSpec, StudySpec, TrialConfig
from normfree.workers.evolution import (
    GROUP,
    RECORD_PREFIX,
    REJECTED,
    GenerateOptions,
    GenerationRecord,
    GenerationStopped,
    Individual,
    PrescreenFn,
    Seen,
    fitness_of,
    generate_options,
    generated_name,
    run_generation,
    seed_generation,
    validate_spec,
)
from normfree.workers.scheduling import base_config, norm_spec, paired_seeds

__all__ = [
    "Constraint",
    "ConstraintError",
    "GenerateOptions",
    "GenerationRecord",
    "GenerativePlanner",
    "ImportanceSource",
    "Individual",
    "Seen",
    "generate_options",
    "generated_name",
    "load_records",
    "run_generation",
    "study_report",
    "summarize_records",
    "validate_spec",
]


class GenerativePlanner:
    """Plans a ``generate`` study's generations for the driver, from storage alone.

    ``next_generation()`` is called by the driver when nothing of the study is waiting or
    running; it returns how many trials it added (0: the study has no generation left).
    Generation records live in the Optuna study's user attributes (the sampler state of this
    study kind); trials and discovered candidates in normfree's storage.
    """

    def __init__(
        self,
        spec: StudySpec,
        study_id: int,
        store: Any,
        optuna_study: Any,
        *,
        prescreen_fn: PrescreenFn | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.spec = spec
        self.study_id = study_id
        self.store = store
        self.optuna = optuna_study
        self.opts = generate_options(spec)
        self.progress = progress
        if prescreen_fn is None and self.opts.prescreen:
            from normfree.workers.prescreen import prescreen

            def prescreen_fn(norm: NormSpec) -> Mapping[str, Any]:
                return prescreen(norm, spec.proxy)

        self.prescreen_fn = prescreen_fn if self.opts.prescreen else None
        from normfree.workers.scheduling import objective_of

        self.direction = objective_of(spec.proxy)[1]
        self._checked_at = -1.0
        self._stop = False

    # -- records ------------------------------------------------------------------------------
    def records(self) -> list[GenerationRecord]:
        return load_records(self.optuna)

    def _write(self, record: GenerationRecord) -> None:
        key = f"{RECORD_PREFIX}{record.generation:04d}"
        self.optuna.set_user_attr(key, record.model_dump(mode="json"))

    # -- state from storage -------------------------------------------------------------------
    def _seen(self, records: Sequence[GenerationRecord]) -> Seen:
        seen = Seen(catalog.all())
        for row in self.store.repo.list_candidates():
            seen.add(row.get("canonical"), row.get("fingerprint"), row["name"])
        for rec in records:
            for p in rec.proposals:
                if p.get("fingerprint"):
                    seen.add(None, p["fingerprint"], p.get("name") or "?")
        return seen

    def _population(self, records: Sequence[GenerationRecord]) -> list[Individual]:
        rows = self.store.repo.list_trials(self.study_id)
        values: dict[str, list[float | None]] = {}
        for r in rows:
            values.setdefault(r["candidate"], []).append(
                r["value"] if r["status"] == "COMPLETE" else None
            )
        members: list[Individual] = []
        for rec in records:
            for p in rec.trained:
                expr = _expr_of(p)
                if expr is None:
                    continue
                fit = fitness_of(values.get(p["name"], []), self.direction)
                members.append(Individual(p["name"], expr, rec.generation, fit))
        return members[-self.opts.population :]

    # -- materialise --------------------------------------------------------------------------
    def _materialize(self, record: GenerationRecord) -> int:
        """Store the record's trained candidates (with lineage) and add their trials."""
        items = []
        for p in record.trained:
            if p["verdict"] == "train" and self.store.repo.get_candidate(p["name"]) is None:
                self.store.repo.upsert_candidate(self._candidate_row(p, record.generation))
            norm = NormSpec(name=p["name"], formula=p.get("formula"), **self._norm_fields())
            for seed in paired_seeds(self.spec):
                config = TrialConfig(**base_config(self.spec), norm=norm, seed=seed)
                axes = {
                    "function": p["name"],
                    "generation": record.generation,
                    "origin": p.get("mutation") or p["verdict"],
                    "seed": seed,
                }
                items.append((config, axes))
        if record.generation == 0:
            for b in self.spec.baselines:
                norm = norm_spec(b, self.spec)  # the study's affine applies to baselines too
                for seed in paired_seeds(self.spec):
                    config = TrialConfig(**base_config(self.spec), norm=norm, seed=seed)
                    items.append((config, {"function": b, "baseline": True, "seed": seed}))
        before = self.store.repo.study_progress(self.study_id)["total"]
        self.store.repo.add_trials(self.study_id, items)
        return self.store.repo.study_progress(self.study_id)["total"] - before

    def _candidate_row(self, p: Mapping[str, Any], generation: int) -> dict[str, Any]:
        cand = realize_text(p["formula"], p["name"])
        return {
            "name": p["name"],
            "formula": cand.formula,
            "canonical": cand.canonical,
            "fingerprint": cand.fingerprint,
            "properties": cand.properties.model_dump(mode="json"),
            "lineage": {
                "base": p["name"],
                "formula": cand.formula,
                "steps": [],
                "parents": list(p.get("parents") or []),
                "mutation": p.get("mutation"),
                "generation": generation,
                "study_id": self.study_id,
            },
            "group": GROUP,
            "citation": f"discovered by normfree generate study {self.study_id}",
        }

    def _norm_fields(self) -> dict[str, Any]:
        """A discovered candidate's NormSpec fields: the study's, plus its fixed ``alpha0``."""
        from normfree.workers.kinds.generate import GenerateKindParams

        params = GenerateKindParams.model_validate(self.spec.params)
        out = norm_spec("candidate", self.spec).model_dump(include={"shift", "affine"})
        if params.affine is None:  # the norm's own default
            out.pop("affine")
        if params.alpha0 is not None:
            out["alpha0"] = params.alpha0
        return out

    # -- the step -----------------------------------------------------------------------------
    def next_generation(self) -> int:
        """Plan (and insert) the next generation that trains something.

        Returns the number of trials added: 0 when the study still has trials waiting or
        running (a generation's parents need their results) or when no generation is left.
        """
        counts = self.store.repo.study_progress(self.study_id)["counts"]
        if counts.get("WAITING", 0) + counts.get("RUNNING", 0):
            return 0
        records = self.records()
        if records:  # a crash may have come between the record and its trials: re-insert
            added = self._materialize(records[-1])
            if added:
                return added
        try:
            return self._plan(records)
        except GenerationStopped:  # cancelled or paused mid-generation: nothing was decided
            return 0

    def _stopped(self) -> bool:
        """Whether the study was paused or cancelled (read at most every half second: a
        proposal costs a fraction of that, a trial's epoch far more)."""
        now = time.monotonic()
        if now - self._checked_at >= 0.5:
            self._checked_at = now
            self._stop = self.store.study_status(self.study_id) in ("paused", "cancelled")
        return self._stop

    def _plan(self, records: list[GenerationRecord]) -> int:
        while len(records) <= self.opts.generations:
            g = len(records)
            seen = self._seen(records)
            if g == 0 and self.spec.functions:
                record = seed_generation(self.spec.functions, seen, self.spec.definitions)
            else:
                record, _ = run_generation(
                    g,
                    self._population(records),
                    seen,
                    self.opts,
                    prescreen_fn=self.prescreen_fn,
                    rng=random.Random(f"normfree-generate:{self.opts.sampler_seed}:{g}"),
                    norm_fields=self._norm_fields(),
                    progress=self.progress,
                    should_stop=self._stopped,
                )
            self._write(record)  # decisions first: a restart re-inserts, never re-decides
            records.append(record)
            added = self._materialize(record)
            if added:
                return added
        return 0


def realize_text(formula: str, name: str) -> Candidate:
    from normfree.search_space import parse

    return parse(formula, name=name)


def _expr_of(p: Mapping[str, Any]) -> Any:
    from normfree.search_space.resolver import resolve

    try:  # a seed's formula may be a baked transform call (``shift_h(1.5*u/(1+abs(u)), 0.5)``)
        if p.get("formula"):
            return resolve(p["formula"], name=p["name"]).expr
        return catalog.resolve(p["name"]).expr
    except ExpressionError:
        return None


def load_records(optuna_study: Any) -> list[GenerationRecord]:
    """The study's generation records, in order (from the Optuna study's user attributes)."""
    attrs = optuna_study.user_attrs
    keys = sorted(k for k in attrs if k.startswith(RECORD_PREFIX))
    return [GenerationRecord.model_validate(attrs[k]) for k in keys]


# ----------------------------------------------------------------- the report, as data


@dataclass
class GenerationSummary:
    generation: int
    proposed: int
    counts: dict[str, int]
    trained: list[str]
    filter_s: float
    prescreen_s: float
    best: dict[str, Any] | None = None
    lineage: list[dict[str, Any]] = field(default_factory=list)


def summarize_records(records: Sequence[GenerationRecord]) -> dict[str, Any]:
    """Per-generation counts and totals: how much was rejected before training, and why."""
    gens = []
    totals: dict[str, int] = {}
    filter_s = prescreen_s = 0.0
    for rec in records:
        for k, v in rec.counts.items():
            totals[k] = totals.get(k, 0) + v
        filter_s += rec.filter_s
        prescreen_s += rec.prescreen_s
        gens.append(
            {
                "generation": rec.generation,
                "proposed": len(rec.proposals),
                "counts": rec.counts,
                "trained": [p["name"] for p in rec.trained],
                "lineage": [
                    {k: p.get(k) for k in ("name", "formula", "parents", "mutation", "score")}
                    for p in rec.trained
                ],
                "filter_s": round(rec.filter_s, 3),
                "prescreen_s": round(rec.prescreen_s, 3),
            }
        )
    generated = sum(v for k, v in totals.items() if k != "seed")
    rejected = sum(totals.get(k, 0) for k in REJECTED)
    return {
        "generations": gens,
        "totals": totals,
        "proposed": generated,
        "rejected_before_training": rejected,
        "fraction_rejected": rejected / generated if generated else None,
        "filter_s": round(filter_s, 3),
        "prescreen_s": round(prescreen_s, 3),
    }


# Where a report's importance comes from: given the study's per-status trial counts, the
# importance and whether it lags them (``api.search_importance.lookup``: the stored document,
# never computed on the read, a refresh started in the background when it lags).
ImportanceSource = Callable[[Mapping[str, int]], tuple[dict[str, Any] | None, bool]]


def study_report(
    store: Any, study_id: int, importance: ImportanceSource | None = None
) -> dict[str, Any]:
    """What a generate study did and learnt: generations (from Optuna) and property importance.

    ``store`` is a ``workers.execution.TrialStore`` (or anything with ``repo`` and
    ``optuna_storage()``). Missing Optuna records (a study never run) give empty generations.
    The importance is the one the driver stored with the Optuna study when the study's latest
    trial was written (``storage.study_documents``): computing it takes seconds (scipy, sympy,
    every function resolved). ``importance``: where to look it up (the API's, which refreshes
    a lagging one in the background); without it, the stored one when it matches the trials,
    else computed here (a command has no background to wait for). ``importance_stale``: the
    importance shown was computed before the latest trials were written (or none is stored).
    """
    import optuna

    from normfree.storage.study_documents import IMPORTANCE_ATTR, outcome_counts
    from normfree.workers.importance import importance_with_counts

    study = store.repo.get_study(study_id)
    if study is None:
        raise KeyError(f"no study {study_id}")
    try:
        ostudy = optuna.load_study(
            study_name=study["optuna_study_name"] or f"normfree-study-{study_id}",
            storage=store.optuna_storage(),
        )
        records = load_records(ostudy)
        stored = ostudy.user_attrs.get(IMPORTANCE_ATTR)
    except KeyError:
        records, stored = [], None
    out = summarize_records(records)
    rows = store.repo.list_trials(study_id)
    done = [r for r in rows if r["total_time_s"] and r["status"] in ("COMPLETE", "PRUNED")]
    mean_trial_s = sum(r["total_time_s"] for r in done) / len(done) if done else None
    out["mean_trial_s"] = mean_trial_s
    seeds = max(1, int((study.get("spec") or {}).get("seeds") or 1))
    if mean_trial_s is not None and out["rejected_before_training"]:
        out["trial_s_avoided"] = out["rejected_before_training"] * seeds * mean_trial_s
    else:
        out["trial_s_avoided"] = None
    counts = Counter(r["status"] for r in rows)
    if importance is not None:
        out["importance"], out["importance_stale"] = importance(counts)
    elif isinstance(stored, dict) and stored.get("counts") == outcome_counts(counts):
        out["importance"], out["importance_stale"] = stored.get("importance"), False
    else:
        out["importance"] = importance_with_counts(store.repo, study_id)["importance"]
        out["importance_stale"] = False
    return out
