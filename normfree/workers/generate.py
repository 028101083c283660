"""The generative study: discover new functions by regularised evolution over expressions.

A ``generate`` study evolves sympy trees from :mod:`normfree.search_space.grammar`:

- **generation 0**: the study's ``functions`` (catalog names) as they are, or, without them,
  ``population`` fresh samples from the grammar that pass the filters below.
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

import hashlib
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from normfree.search_space import Candidate, ExpressionError, Properties, catalog, same_function
from normfree.search_space.grammar import Grammar, GrammarLimits, realize, to_text
from normfree.specs import BASELINES, NormSpec, StudySpec, TrialConfig
from normfree.workers.scheduling import base_config, norm_spec, paired_seeds

__all__ = [
    "Constraint",
    "ConstraintError",
    "GenerateOptions",
    "GenerationRecord",
    "GenerativePlanner",
    "Individual",
    "Seen",
    "generate_options",
    "generated_name",
    "run_generation",
    "study_report",
    "validate_spec",
]

RECORD_PREFIX = "normfree_generation_"
GROUP = "generated"
Verdict = Literal["seed", "invalid", "duplicate", "constraint", "prescreen", "ranked_out", "train"]
REJECTED: tuple[str, ...] = ("invalid", "duplicate", "constraint", "prescreen", "ranked_out")


# ================================================================ the constraint language


class ConstraintError(ValueError):
    """A constraint string normfree refuses, with the character position of the problem."""

    def __init__(self, message: str, position: int | None = None) -> None:
        self.message = message
        self.position = position
        where = f" (at position {position})" if position is not None else ""
        super().__init__(f"{message}{where}")


MAX_CONSTRAINT_LENGTH = 500
MAX_CONSTRAINT_TOKENS = 120
MAX_CONSTRAINT_DEPTH = 16

_BOOL_FIELDS = ("zero_centred", "odd", "bounded", "continuous", "differentiable")
_NUM_FIELDS = (
    "f0",
    "slope0",
    "flat_halfwidth",
    "growth_exponent",
    "limit_neg",
    "limit_pos",
    "range_min",
    "range_max",
)
_STR_FIELDS: dict[str, tuple[str, ...]] = {
    name: tuple(get_args(Properties.model_fields[name].annotation))
    for name in ("monotone", "growth")
}
# Flags that read as English: name -> (field, operator, value).
_ALIASES: dict[str, tuple[str, str, Any]] = {
    "monotone": ("monotone", "in", ("increasing", "decreasing")),
    "increasing": ("monotone", "==", "increasing"),
    "decreasing": ("monotone", "==", "decreasing"),
    "smooth": ("differentiable", "==", True),
    "zero_centered": ("zero_centred", "==", True),
    "centred": ("zero_centred", "==", True),
    "centered": ("zero_centred", "==", True),
    "flat_centre": ("flat_halfwidth", ">", 0.0),
    "flat_center": ("flat_halfwidth", ">", 0.0),
    "unbounded": ("bounded", "==", False),
}
_KEYWORDS = ("and", "or", "not", "in", "true", "false")
_COMPARE = ("==", "!=", "<=", ">=", "<", ">")


def _squash(word: str) -> str:
    """Spelling-insensitive value key: 'sub-linear power' = sub_linear_power = sublinearpower."""
    return word.lower().replace("-", "").replace("_", "").replace(" ", "")


@dataclass(frozen=True)
class _Tok:
    kind: str  # name, num, str, op, end
    text: str
    pos: int


def _tokenize_constraint(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in " \t":
            i += 1
        elif ch.isascii() and (ch.isalpha() or ch == "_"):
            j = i
            while j < n and text[j].isascii() and (text[j].isalnum() or text[j] == "_"):
                j += 1
            toks.append(_Tok("name", text[i:j].lower(), i))
            i = j
        elif ch.isascii() and (ch.isdigit() or ch in ".-+"):
            j = i + 1
            while j < n and text[j].isascii() and (text[j].isalnum() or text[j] in ".+-"):
                if text[j] in "+-" and text[j - 1] not in "eE":
                    break
                j += 1
            try:
                value = float(text[i:j])
            except ValueError:
                raise ConstraintError(f"malformed number {text[i:j]!r}", i) from None
            if not math.isfinite(value):
                raise ConstraintError("numbers must be finite", i)
            toks.append(_Tok("num", text[i:j], i))
            i = j
        elif ch in "'\"":
            j = text.find(ch, i + 1)
            if j < 0:
                raise ConstraintError("unterminated string", i)
            word = text[i + 1 : j]
            if not _squash(word).isalnum() or len(word) > 40:
                raise ConstraintError("a quoted value holds letters, digits, '-', '_', ' '", i)
            toks.append(_Tok("str", word.lower(), i))
            i = j + 1
        else:
            for op in (*_COMPARE, "(", ")", ","):
                if text.startswith(op, i):
                    toks.append(_Tok("op", op, i))
                    i += len(op)
                    break
            else:
                raise ConstraintError(f"unexpected character {ch!r}", i)
        if len(toks) > MAX_CONSTRAINT_TOKENS:
            raise ConstraintError(
                f"constraint too long: more than {MAX_CONSTRAINT_TOKENS} tokens", i
            )
    toks.append(_Tok("end", "", n))
    return toks


@dataclass(frozen=True)
class _Cmp:
    field: str
    op: str  # one of _COMPARE or "in"
    value: Any
    text: str  # the clause as written, for rejection reasons

    def __call__(self, props: Properties) -> bool:
        have = getattr(props, self.field)
        if self.op == "in":
            return have in self.value
        if have is None:
            return self.op == "!="
        if self.op == "==":
            return have == self.value
        if self.op == "!=":
            return have != self.value
        return {"<": have < self.value, "<=": have <= self.value, ">": have > self.value,
                ">=": have >= self.value}[self.op]  # fmt: skip


@dataclass(frozen=True)
class _Not:
    item: Any

    def __call__(self, props: Properties) -> bool:
        return not self.item(props)


@dataclass(frozen=True)
class _All:
    items: tuple[Any, ...]

    def __call__(self, props: Properties) -> bool:
        return all(i(props) for i in self.items)


@dataclass(frozen=True)
class _Any:
    items: tuple[Any, ...]

    def __call__(self, props: Properties) -> bool:
        return any(i(props) for i in self.items)


class _ConstraintParser:
    """Recursive descent: or := and ("or" and)*; and := not ("and" not)*; not := "not" not | atom;
    atom := "(" or ")" | FIELD OP VALUE | FIELD "in" "(" VALUE ("," VALUE)* ")" | FLAG."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokenize_constraint(text)
        self.i = 0
        self.depth = 0

    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def is_op(self, text: str) -> bool:
        return self.tok.kind == "op" and self.tok.text == text

    def is_word(self, text: str) -> bool:
        return self.tok.kind == "name" and self.tok.text == text

    def parse(self) -> Any:
        node = self.or_()
        if self.tok.kind != "end":
            raise ConstraintError(f"unexpected {self.tok.text!r}", self.tok.pos)
        return node

    def or_(self) -> Any:
        items = [self.and_()]
        while self.is_word("or"):
            self.take()
            items.append(self.and_())
        return items[0] if len(items) == 1 else _Any(tuple(items))

    def and_(self) -> Any:
        items = [self.not_()]
        while self.is_word("and"):
            self.take()
            items.append(self.not_())
        return items[0] if len(items) == 1 else _All(tuple(items))

    def not_(self) -> Any:
        if self.is_word("not"):
            t = self.take()
            self.enter(t.pos)
            inner = self.not_()
            self.depth -= 1
            return _Not(inner)
        return self.atom()

    def enter(self, pos: int) -> None:
        self.depth += 1
        if self.depth > MAX_CONSTRAINT_DEPTH:
            raise ConstraintError(f"constraint nested more than {MAX_CONSTRAINT_DEPTH} deep", pos)

    def atom(self) -> Any:
        t = self.tok
        if self.is_op("("):
            self.take()
            self.enter(t.pos)
            inner = self.or_()
            self.depth -= 1
            if not self.is_op(")"):
                raise ConstraintError("expected ')'", self.tok.pos)
            self.take()
            return inner
        if t.kind != "name" or t.text in _KEYWORDS:
            found = "end of constraint" if t.kind == "end" else repr(t.text)
            raise ConstraintError(f"expected a property, found {found}", t.pos)
        self.take()
        name = t.text
        if self.tok.kind == "op" and self.tok.text in _COMPARE:
            op = self.take().text
            return self.compare(name, op, t)
        if self.is_word("in"):
            self.take()
            return self.member(name, t)
        if name in _ALIASES:
            fld, op, value = _ALIASES[name]
            return _Cmp(fld, op, value, name)
        if name in _BOOL_FIELDS:
            return _Cmp(name, "==", True, name)
        raise ConstraintError(self.unknown(name), t.pos)

    @staticmethod
    def unknown(name: str) -> str:
        fields = sorted([*_BOOL_FIELDS, *_NUM_FIELDS, *_STR_FIELDS, *_ALIASES])
        return f"unknown property {name!r}; use one of {', '.join(fields)}"

    def value(self) -> _Tok:
        t = self.take()
        if t.kind not in ("num", "str", "name") or t.text in ("and", "or", "not", "in"):
            raise ConstraintError("expected a value", t.pos)
        return t

    def typed(self, name: str, t: _Tok) -> Any:
        if name in _BOOL_FIELDS:
            if t.text not in ("true", "false"):
                raise ConstraintError(f"{name} is true or false", t.pos)
            return t.text == "true"
        if name in _NUM_FIELDS:
            if t.kind != "num":
                raise ConstraintError(f"{name} is compared with a number", t.pos)
            return float(t.text)
        allowed = {_squash(v): v for v in _STR_FIELDS[name]}
        if _squash(t.text) not in allowed:
            raise ConstraintError(f"{name} is one of {', '.join(allowed.values())}", t.pos)
        return allowed[_squash(t.text)]

    def compare(self, name: str, op: str, t: _Tok) -> _Cmp:
        if name not in (*_BOOL_FIELDS, *_NUM_FIELDS, *_STR_FIELDS):
            raise ConstraintError(self.unknown(name), t.pos)
        if op not in ("==", "!=") and name not in _NUM_FIELDS:
            raise ConstraintError(f"{name} can only be compared with == or !=", t.pos)
        v = self.value()
        return _Cmp(name, op, self.typed(name, v), self.text[t.pos : v.pos + len(v.text)])

    def member(self, name: str, t: _Tok) -> _Cmp:
        if name not in _STR_FIELDS:
            raise ConstraintError(f"'in' applies to {', '.join(_STR_FIELDS)}", t.pos)
        if not self.is_op("("):
            raise ConstraintError("expected '(' after 'in'", self.tok.pos)
        self.take()
        values = [self.typed(name, self.value())]
        while self.is_op(","):
            self.take()
            values.append(self.typed(name, self.value()))
        if not self.is_op(")"):
            raise ConstraintError("expected ')'", self.tok.pos)
        end = self.take()
        return _Cmp(name, "in", tuple(values), self.text[t.pos : end.pos + 1])


class Constraint:
    """A parsed constraint over :class:`Properties`, e.g. ``bounded and monotone``.

    Language: flags (``bounded``, ``odd``, ``zero_centred``, ``continuous``, ``differentiable``
    and the aliases ``monotone``, ``increasing``, ``smooth``, ``flat_centre``, ``unbounded``),
    comparisons (``slope0 >= 0.5``, ``growth == logarithmic``, ``monotone != neither``),
    membership (``growth in (bounded, logarithmic)``), ``not``, ``and``, ``or``, parentheses.
    Parsed by a bounded recursive-descent parser; evaluated by reading whitelisted fields of a
    ``Properties`` object. Never ``eval``: a hostile string is a :class:`ConstraintError`.
    """

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise ConstraintError("a constraint is text")
        if len(text) > MAX_CONSTRAINT_LENGTH:
            raise ConstraintError(f"constraint longer than {MAX_CONSTRAINT_LENGTH} characters")
        if not text.strip():
            raise ConstraintError("empty constraint", 0)
        self.text = text.strip()
        self._root = _ConstraintParser(self.text).parse()

    def __call__(self, props: Properties) -> bool:
        return bool(self._root(props))

    def fields(self) -> list[str]:
        """Property fields the constraint reads (for rejection reasons)."""
        out: list[str] = []

        def walk(node: Any) -> None:
            if isinstance(node, _Cmp):
                out.append(node.field)
            elif isinstance(node, _Not):
                walk(node.item)
            else:
                for i in node.items:
                    walk(i)

        walk(self._root)
        return list(dict.fromkeys(out))

    def explain(self, props: Properties) -> str:
        """Why ``props`` fails: the constraint and the values it read."""
        values = ", ".join(f"{f}={getattr(props, f)!r}" for f in self.fields())
        return f"violates {self.text!r} ({values})"

    def __repr__(self) -> str:
        return f"Constraint({self.text!r})"


# ================================================================ options


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
        catalog.resolve(fn)  # ExpressionError (a ValueError) for an unknown function
    return opts


# ================================================================ the evolution, pure


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
) -> tuple[GenerationRecord, dict[str, Candidate]]:
    """Propose, filter, prescreen and rank one generation; no training, no storage.

    Returns the record (every proposal with its verdict) and the candidates to train by name.
    ``seen`` is updated with every valid proposal, so a later generation never proposes them
    again. ``prescreen_fn`` None skips the prescreen (survivors keep proposal order).
    """
    grammar = opts.grammar()
    constraint = opts.constraint()
    want = opts.n_children(generation)
    screen_cap = opts.prescreen_budget(generation) if prescreen_fn else want
    record = GenerationRecord(generation=generation, created_at=time.time())
    passed: list[tuple[dict[str, Any], Candidate]] = []
    t0 = time.perf_counter()
    for _ in range(opts.proposal_budget(generation)):
        if len(passed) >= screen_cap:
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


def seed_generation(functions: Sequence[str], seen: Seen) -> GenerationRecord:
    """Generation 0 from catalog functions: trained as they are (the study's references)."""
    record = GenerationRecord(generation=0, created_at=time.time())
    for fn in functions:
        c = catalog.resolve(fn)
        seen.add(c.canonical, c.fingerprint, c.name)
        record.proposals.append(
            {"name": c.name, "formula": None, "fingerprint": c.fingerprint, "verdict": "seed",
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


# ================================================================ the planner (storage + Optuna)


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
        out = norm_spec("candidate", self.spec).model_dump(include={"shift", "affine"})
        if "affine" not in self.spec.params:
            out.pop("affine")
        if "alpha0" in self.spec.params:
            out["alpha0"] = float(self.spec.params["alpha0"])
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
        while len(records) <= self.opts.generations:
            g = len(records)
            seen = self._seen(records)
            if g == 0 and self.spec.functions:
                record = seed_generation(self.spec.functions, seen)
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
    try:
        if p.get("formula"):
            return realize_text(p["formula"], p["name"]).expr
        return catalog.resolve(p["name"]).expr
    except ExpressionError:
        return None


def load_records(optuna_study: Any) -> list[GenerationRecord]:
    """The study's generation records, in order (from the Optuna study's user attributes)."""
    attrs = optuna_study.user_attrs
    keys = sorted(k for k in attrs if k.startswith(RECORD_PREFIX))
    return [GenerationRecord.model_validate(attrs[k]) for k in keys]


# ================================================================ reporting


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


def study_report(store: Any, study_id: int) -> dict[str, Any]:
    """What a generate study did and learnt: generations (from Optuna) and property importance.

    ``store`` is a ``workers.execution.TrialStore`` (or anything with ``repo`` and
    ``optuna_storage()``). Missing Optuna records (a study never run) give empty generations.
    """
    import optuna

    from normfree.workers.importance import study_importance

    study = store.repo.get_study(study_id)
    if study is None:
        raise KeyError(f"no study {study_id}")
    try:
        ostudy = optuna.load_study(
            study_name=study["optuna_study_name"] or f"normfree-study-{study_id}",
            storage=store.optuna_storage(),
        )
        records = load_records(ostudy)
    except KeyError:
        records = []
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
    out["importance"] = study_importance(store.repo, study_id)
    return out


def print_report(report: Mapping[str, Any]) -> None:
    """The human form of :func:`study_report` (CLI): generations table, importance ranking."""
    from rich.console import Console
    from rich.table import Table

    cols = ("invalid", "duplicate", "constraint", "prescreen", "ranked_out", "train", "seed")
    t = Table(title="generations: proposals and where they stopped")
    for c in ("gen", "proposed", *cols):
        t.add_column(c)
    for g in report["generations"]:
        t.add_row(
            str(g["generation"]),
            str(g["proposed"]),
            *(str(g["counts"].get(c, 0)) for c in cols),
        )
    console = Console()
    console.print(t)
    frac = report.get("fraction_rejected")
    if frac is not None:
        saved = report.get("trial_s_avoided")
        extra = f", ~{saved:.0f} trial-seconds avoided" if saved else ""
        console.print(f"rejected before training: {100 * frac:.0f}% of proposals{extra}")
    imp = report.get("importance") or {}
    rows = [f for f in imp.get("features", []) if not f.get("constant")]
    if rows:
        t = Table(title=f"property importance ({imp['method']}, n={imp['n_candidates']})")
        for c in ("property", "rho", "95% CI"):
            t.add_column(c)
        for f in rows:
            ci = f"[{f['ci_low']:+.2f}, {f['ci_high']:+.2f}]" if f["ci_low"] is not None else "-"
            t.add_row(f["name"], f"{f['rho']:+.2f}", ci)
        console.print(t)
    elif imp.get("note"):
        console.print(f"property importance: {imp['note']}")
