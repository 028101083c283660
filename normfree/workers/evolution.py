"""The generate study's evolution, pure: options, proposals, filters and one generation.

Regularised evolution over expression trees (why, and the filters' order, in
:mod:`normfree.workers.generate`): nothing here touches storage or Optuna, so a generation is a
function of (population, what the study has seen, options, a seeded RNG, the prescreen), and the
tests run it without a database.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from normfree.search_space import Candidate, ExpressionError, catalog, same_function
from normfree.search_space.constraints import Constraint, ConstraintError
from normfree.search_space.grammar import Grammar, GrammarLimits, realize, to_text
from normfree.specs import BASELINES, NormSpec, StudySpec

RECORD_PREFIX = "normfree_generation_"
GROUP = "generated"
Verdict = Literal[
    "seed", "invalid", "duplicate", "constraint", "prescreen", "budget", "ranked_out", "train"
]
REJECTED: tuple[str, ...] = (
    "invalid",
    "duplicate",
    "constraint",
    "prescreen",
    "budget",
    "ranked_out",
)


# CPU-seconds of one proposal (realize, dedup, properties, constraint) and of one prescreen
# (a few aggressive steps of the tiny proxy): upper ends of what this package's runs take on
# one core of the machines of bench/results (a new formula's check 0.2-0.6 s, a prescreen 1-4 s).
PROPOSAL_SECONDS = 0.6
PRESCREEN_SECONDS = 5.0


class GenerationStopped(Exception):
    """The study was paused or cancelled while a generation was being planned."""


class GenerateOptions(BaseModel):
    """The knobs of a generative study (``StudySpec.params``; unknown keys are ignored there)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    generations: int = Field(3, ge=0, le=1000)  # evolution rounds after generation 0
    population: int = Field(8, ge=1, le=1000)  # aging window, and generation 0's size
    children: int | None = Field(None, ge=1, le=1000)  # trained per round (default: P/2)
    tournament: int = Field(3, ge=1, le=100)
    p_crossover: float = Field(0.25, ge=0.0, le=1.0)
    constraints: str | None = None
    max_size: int = Field(24, ge=3, le=150)
    max_depth: int = Field(6, ge=2, le=10)
    max_proposals: int | None = Field(None, ge=1, le=100000)  # per generation (default 25/child)
    max_prescreen: int | None = Field(None, ge=0, le=10000)  # per generation (default 2/child)
    prescreen: bool = True
    sampler_seed: int = 0

    def n_children(self, generation: int) -> int:
        if generation == 0:
            return self.population
        return self.children or max(1, (self.population + 1) // 2)

    def proposal_budget(self, generation: int) -> int:
        return self.max_proposals or 25 * self.n_children(generation)

    def prescreen_budget(self, generation: int) -> int:
        n = self.max_prescreen
        return 2 * self.n_children(generation) if n is None else max(n, self.n_children(generation))

    def planning_seconds(self, generation: int, prescreen: bool = True) -> float:
        """The most CPU-seconds generation ``generation`` may spend before it trains anything:
        every proposal it may make and every prescreen it may run, at their measured costs
        (:data:`PROPOSAL_SECONDS`, :data:`PRESCREEN_SECONDS`). The cost estimate counts it
        (``workers.cost``) and :func:`run_generation` stops at it, so the estimate bounds
        what the generation can spend."""
        screens = self.prescreen_budget(generation) if prescreen and self.prescreen else 0
        return self.proposal_budget(generation) * PROPOSAL_SECONDS + screens * PRESCREEN_SECONDS

    def grammar(self) -> Grammar:
        return Grammar(GrammarLimits(max_size=self.max_size, max_depth=self.max_depth))

    def constraint(self) -> Constraint | None:
        return Constraint(self.constraints) if self.constraints else None


def generate_options(spec: StudySpec) -> GenerateOptions:
    """The study's options, validated; ValueError with a readable reason otherwise."""
    try:
        opts = GenerateOptions.model_validate(spec.params)
    except ValidationError as exc:
        errs = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"invalid generate options: {errs}") from None
    try:
        opts.constraint()
    except ConstraintError as exc:
        raise ConstraintError(f"invalid constraints: {exc.message}", exc.position) from None
    opts.grammar()
    return opts


def validate_spec(spec: StudySpec) -> GenerateOptions:
    """Everything ``create_study`` must refuse before writing a generate study."""
    if spec.kind != "generate":
        raise ValueError(f"not a generate study: {spec.kind!r}")
    from normfree.workers.proxies import get_preset

    get_preset(spec.proxy)
    if spec.seeds < 1:
        raise ValueError("a generate study needs at least one seed")
    opts = generate_options(spec)
    for fn in spec.functions:
        if fn in BASELINES:
            raise ValueError(f"{fn!r} is a baseline: list it under baselines, not functions")
        seed_candidate(fn, spec.definitions)  # ExpressionError (a ValueError) when unknown
    return opts


def seed_candidate(fn: str, definitions: Mapping[str, str]) -> tuple[Candidate, str | None]:
    """(candidate, baked definition or None) of a study function that seeds generation 0.

    The one resolver, fed only the study's baked ``definitions`` (stored name -> formula, from
    ``workers.validation``): a stored user candidate seeds like a catalog name, and the
    definition travels in the seed's record so a worker without a database builds it."""
    from normfree.search_space.resolver import Stored, definition, resolve

    baked = definition(fn, definitions) if definitions else None
    if baked is None:  # a catalog name, formula or transform: cached per process
        return catalog.resolve(fn), None
    return resolve(baked, Stored(formula=definitions.get), name=fn), baked


def generated_name(c: Candidate) -> str:
    """A discovered function's name: its behaviour's hash, so rediscovery meets the same row."""
    return f"gen-{c.fingerprint[:10]}"


@dataclass
class Individual:
    """A trained member of the population (its fitness: mean objective, higher is better)."""

    name: str
    expr: Any  # sympy
    generation: int
    fitness: float | None = None  # None: no completed trial (diverged, pruned, failed)


class Seen:
    """Everything a study must not train again: canonical forms and fingerprints, with names.

    The catalog is also compared with ``same_function`` (a numeric tolerance), because a
    fingerprint is a rounded hash that two equal functions can straddle.
    """

    def __init__(self, pool: Iterable[Candidate] = ()) -> None:
        self.canonical: dict[str, str] = {}
        self.fingerprint: dict[str, str] = {}
        self.pool = [c for c in pool]
        for c in self.pool:
            self.add(c.canonical, c.fingerprint, c.name)

    def add(self, canonical: str | None, fingerprint: str | None, name: str) -> None:
        if canonical:
            self.canonical.setdefault(_sha(canonical), name)
        if fingerprint:
            self.fingerprint.setdefault(fingerprint, name)

    def match(self, c: Candidate) -> str | None:
        """The name of what ``c`` duplicates, or None."""
        hit = self.canonical.get(_sha(c.canonical)) or self.fingerprint.get(c.fingerprint)
        if hit:
            return hit
        for other in self.pool:
            if same_function(c, other):
                return other.name
        return None


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class GenerationRecord(BaseModel):
    """What one generation decided: every proposal with its verdict, and what it cost."""

    model_config = ConfigDict(extra="ignore")

    generation: int
    proposals: list[dict[str, Any]] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)
    filter_s: float = 0.0  # validity + dedup + properties + constraints
    prescreen_s: float = 0.0
    created_at: float = 0.0

    @property
    def trained(self) -> list[dict[str, Any]]:
        return [p for p in self.proposals if p["verdict"] in ("train", "seed")]


PrescreenFn = Callable[[NormSpec], Mapping[str, Any]]


def _tournament(pop: Sequence[Individual], k: int, rng: random.Random) -> Individual:
    entrants = rng.sample(list(pop), min(k, len(pop)))
    # The fittest wins; an unfinished fitness loses to any number; ties go to the youngest.
    return max(
        entrants,
        key=lambda i: (-math.inf if i.fitness is None else i.fitness, i.generation),
    )


def _propose(
    grammar: Grammar,
    population: Sequence[Individual],
    opts: GenerateOptions,
    rng: random.Random,
) -> tuple[Any, list[str], str]:
    """One child tree, its parents' names and how it was made (may raise ExpressionError)."""
    if not population:
        return grammar.sample(rng), [], "sample"
    if len(population) > 1 and rng.random() < opts.p_crossover:
        a = _tournament(population, opts.tournament, rng)
        rest = [i for i in population if i.name != a.name]
        b = _tournament(rest, opts.tournament, rng)
        return grammar.crossover(a.expr, b.expr, rng), [a.name, b.name], "crossover"
    parent = _tournament(population, opts.tournament, rng)
    child, kind = grammar.mutate(parent.expr, rng)
    return child, [parent.name], kind


def _prescreen_summary(res: Mapping[str, Any]) -> dict[str, Any]:
    keep = ("survives", "loss_ratio", "std_growth", "grad_ratio", "seconds", "error")
    return {k: res.get(k) for k in keep if k in res}


def run_generation(
    generation: int,
    population: Sequence[Individual],
    seen: Seen,
    opts: GenerateOptions,
    *,
    prescreen_fn: PrescreenFn | None,
    rng: random.Random,
    norm_fields: Mapping[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    seconds: float | None = None,
) -> tuple[GenerationRecord, dict[str, Candidate]]:
    """Propose, filter, prescreen and rank one generation; no training, no storage.

    Returns the record (every proposal with its verdict) and the candidates to train by name.
    ``seen`` is updated with every valid proposal, so a later generation never proposes them
    again. ``prescreen_fn`` None skips the prescreen (survivors keep proposal order).

    ``should_stop`` is asked before every proposal and prescreen (the study was cancelled or
    paused): True raises :class:`GenerationStopped`, nothing decided. ``seconds`` bounds the
    generation's planning in CPU-seconds of this thread (default: ``opts.planning_seconds``):
    past it no more proposals or prescreens are made, and what passed so far is ranked.
    """
    if seconds is None:
        seconds = opts.planning_seconds(generation, prescreen_fn is not None)
    # CPU time of this thread (proposals and prescreens run in it): a loaded machine's slower
    # wall clock must not change what a generation decides
    deadline = time.thread_time() + seconds

    def stop() -> bool:
        if should_stop is not None and should_stop():
            raise GenerationStopped(f"generation {generation} stopped: the study was stopped")
        return time.thread_time() > deadline

    grammar = opts.grammar()
    constraint = opts.constraint()
    want = opts.n_children(generation)
    screen_cap = opts.prescreen_budget(generation) if prescreen_fn else want
    record = GenerationRecord(generation=generation, created_at=time.time())
    passed: list[tuple[dict[str, Any], Candidate]] = []
    t0 = time.perf_counter()
    for _ in range(opts.proposal_budget(generation)):
        if len(passed) >= screen_cap or stop():
            break
        entry: dict[str, Any] = {"parents": [], "mutation": None}
        try:
            expr, parents, how = _propose(grammar, population, opts, rng)
            entry.update(parents=parents, mutation=how, formula=to_text(expr))
            cand = realize(expr)
        except ExpressionError as exc:
            entry.update(verdict="invalid", reason=exc.message)
            record.proposals.append(entry)
            continue
        name = generated_name(cand)
        entry.update(name=name, fingerprint=cand.fingerprint)
        dup = seen.match(cand)
        seen.add(cand.canonical, cand.fingerprint, name)
        if dup is not None:
            entry.update(verdict="duplicate", reason=f"duplicate of {dup}")
        elif constraint is not None and not constraint(cand.properties):
            entry.update(verdict="constraint", reason=constraint.explain(cand.properties))
        else:
            entry["verdict"] = "pending"
            passed.append((entry, cand))
        record.proposals.append(entry)
    record.filter_s = time.perf_counter() - t0

    t1 = time.perf_counter()
    ranked: list[tuple[float, int, dict[str, Any], Candidate]] = []
    for order, (entry, cand) in enumerate(passed):
        score = float(order)  # no prescreen: first come, first trained
        if prescreen_fn is not None:
            if stop():
                entry.update(verdict="budget", reason="the generation's planning time was spent")
                continue
            if progress:
                progress(f"generation {generation}: prescreen {order + 1}/{len(passed)}")
            norm = NormSpec(name=entry["name"], formula=cand.formula, **dict(norm_fields or {}))
            try:
                res = prescreen_fn(norm)
            except Exception as exc:  # a prescreen crash is a verdict on this candidate
                res = {"survives": False, "error": f"{type(exc).__name__}: {exc}"}
            entry["prescreen"] = _prescreen_summary(res)
            ratio = res.get("loss_ratio")
            if not res.get("survives") or ratio is None or not math.isfinite(ratio):
                entry.update(verdict="prescreen", reason=res.get("error") or "did not survive")
                continue
            score = float(ratio)
        entry["score"] = score
        ranked.append((score, order, entry, cand))
    record.prescreen_s = time.perf_counter() - t1
    ranked.sort(key=lambda r: (r[0], r[1]))
    chosen: dict[str, Candidate] = {}
    for i, (_, _, entry, cand) in enumerate(ranked):
        if i < want:
            entry["verdict"] = "train"
            chosen[entry["name"]] = cand
        else:
            entry.update(verdict="ranked_out", reason=f"not in the best {want} by prescreen")
    counts: dict[str, int] = {}
    for p in record.proposals:
        counts[p["verdict"]] = counts.get(p["verdict"], 0) + 1
    record.counts = counts
    return record, chosen


def seed_generation(
    functions: Sequence[str], seen: Seen, definitions: Mapping[str, str] | None = None
) -> GenerationRecord:
    """Generation 0 from the study's functions (catalog names, stored candidates, formulas,
    transforms): trained as they are (the study's references). A stored candidate's seed keeps
    its name and carries its baked definition as ``formula``."""
    record = GenerationRecord(generation=0, created_at=time.time())
    for fn in functions:
        c, baked = seed_candidate(fn, definitions or {})
        seen.add(c.canonical, c.fingerprint, c.name)
        record.proposals.append(
            {"name": c.name, "formula": baked, "fingerprint": c.fingerprint, "verdict": "seed",
             "parents": [], "mutation": None}
        )  # fmt: skip
    record.counts = {"seed": len(functions)}
    return record


def fitness_of(values: Sequence[float | None], direction: str) -> float | None:
    """Mean completed objective, oriented so that higher is better (None: nothing completed)."""
    done = [v for v in values if v is not None and math.isfinite(v)]
    if not done:
        return None
    mean = sum(done) / len(done)
    return mean if direction == "maximize" else -mean
