"""One study validation, for REST (``api.services.studies``), the CLI and Python
(``driver.create_study``): the study is checked whole before anything is written, and the
stored candidates it names are baked into it.

Whole means every function, every (transform, function, value) cell a property study will train,
the baselines, the proxy, the options and the kind's own parameters: a study that is accepted
can be trained trial by trial. Every unknown name comes back with the nearest known ones.

Baking: each stored candidate a study names (``softsign15``, also inside a transform call) is
recorded with its formula in ``StudySpec.definitions``; planning then puts the function's
definition into every trial's ``NormSpec.formula`` (``scheduling.norm_spec``), so a worker, a
Ray worker on another node included, builds the same function without a database.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from normfree.search_space.resolver import Stored, did_you_mean
from normfree.specs import BASELINES, StudySpec
from normfree.workers.errors import ConfigError


class StudyInvalid(ConfigError):
    """A study refused before anything was written; ``problems`` lists every reason."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def stored_names(repo: Any) -> Stored:
    """The stored user candidates of ``repo`` (a ``RepositoryLike``) as the resolver's lookup."""

    def formula(name: str) -> str | None:
        row = repo.get_candidate(name)
        return None if row is None or not row.get("formula") else str(row["formula"])

    def names() -> list[str]:
        return [r["name"] for r in repo.list_candidates(limit=5000)]

    return Stored(formula=formula, names=names)


class _Recorder:
    """A lookup that remembers the stored names it found (for baking) and asks storage once."""

    def __init__(self, stored: Stored | None) -> None:
        self.stored = stored
        self.found: dict[str, str] = {}
        self._seen: dict[str, str | None] = {}

    def formula(self, name: str) -> str | None:
        if name not in self._seen:
            self._seen[name] = self.stored.formula(name) if self.stored is not None else None
        out = self._seen[name]
        if out is not None:
            self.found[name] = out
        return out

    def lookup(self) -> Stored:
        names: Callable[[], Any] = self.stored.names if self.stored is not None else tuple
        return Stored(formula=self.formula, names=names)


def cell_functions(spec: StudySpec) -> list[tuple[str, str]]:
    """(function, text trained) for every cell the study plans, as its kind spells them (a
    property study's transform calls); the functions as given for an unknown kind."""
    from normfree.workers import kinds

    try:
        return kinds.get(spec.kind).cell_functions(spec)
    except ValueError:  # wrong params: the params check names them
        return [(fn, fn) for fn in spec.functions]


def study_problems(
    spec: StudySpec, stored: Stored | None = None, *, request: bool = True
) -> tuple[list[str], StudySpec]:
    """Every reason to refuse ``spec`` (empty: none), and ``spec`` with its stored candidates
    baked into ``definitions``. ``request``: also the kind's rules for a request
    (``StudyKind.problems``: an options study names options); False keeps only what the
    engine needs to plan it (Python callers: an options study of functions x seeds alone)."""
    from normfree.search_space import ExpressionError, catalog
    from normfree.search_space.resolver import bake, spelling
    from normfree.search_space.transforms import TRANSFORMS
    from normfree.workers import kinds
    from normfree.workers.proxies import PROXIES

    problems: list[str] = []
    if spec.proxy not in PROXIES:
        problems.append(
            f"proxy: unknown {spec.proxy!r}{did_you_mean(spec.proxy, PROXIES)}; "
            f"choose from {sorted(PROXIES)}"
        )
    try:
        kind = kinds.get(spec.kind)
    except KeyError:
        return [*problems, f"kind: unknown {spec.kind!r}"], spec
    if request:
        problems += kind.problems(spec)
    # one spelling per function (``linear_part(erf,0.1)`` is ``linear_part(erf, 0.1)``), once
    functions = list(dict.fromkeys(spelling(fn) for fn in spec.functions))
    if functions != spec.functions:
        spec = spec.model_copy(update={"functions": functions})
    recorder = _Recorder(stored)
    lookup = recorder.lookup()

    def check(text: str, where: str) -> bool:
        try:  # the catalog's answers are cached per process: a paper grid again costs nothing
            catalog.resolve(text)
            return True
        except Exception:  # not the catalog's alone (a stored name?), or wrong: ask with storage
            pass
        try:
            bake(text, lookup)
        except ExpressionError as exc:  # a position only means something in the text given
            problems.append(f"{where}: {exc if where.startswith('functions') else exc.message}")
            return False
        except Exception as exc:  # odd text must be refused, never crash the request
            problems.append(f"{where}: {text!r} cannot be resolved ({type(exc).__name__})")
            return False
        return True

    good = [fn for fn in spec.functions if fn in BASELINES or check(fn, f"functions: {fn!r}")]
    transform_ok = spec.transform is None or spec.transform in TRANSFORMS
    if not transform_ok:
        problems.append(
            f"transform: {spec.transform!r} is not a known transform"
            f"{did_you_mean(spec.transform or '', TRANSFORMS)}; choose from {list(TRANSFORMS)}"
        )
    if transform_ok:
        for fn, text in cell_functions(spec.model_copy(update={"functions": good})):
            if text != fn:
                check(text, f"cell {text}")
    allowed_params = kinds.param_names()
    unknown = sorted(set(spec.params) - allowed_params)
    if unknown:
        problems.append(f"params: unknown {unknown}; allowed: {sorted(allowed_params)}")
    if spec.proxy in PROXIES and spec.options:
        from normfree.workers.kinds.options import NORM_OPTIONS

        allowed = set(NORM_OPTIONS) | set(PROXIES[spec.proxy].config_fields())
        bad = sorted(set(spec.options) - allowed)
        if bad:
            hints = "".join(did_you_mean(b, allowed) for b in bad)
            problems.append(
                f"options: unknown {bad}{hints}; allowed for {spec.proxy}: {sorted(allowed)}"
            )
    for b in spec.baselines:
        if b not in BASELINES:
            problems.append(f"baselines: {b!r} is not one of {list(BASELINES)}")
    baked = spec.model_copy(update={"definitions": {**spec.definitions, **recorder.found}})
    if not problems:
        try:
            kind.validate(baked)  # generate: its options and constraints
            kind.trial_count(baked)
        except (ValueError, KeyError) as exc:
            problems.append(f"params: {exc}")
    return problems, baked


def prepare(spec: StudySpec, stored: Stored | None = None, *, request: bool = True) -> StudySpec:
    """``spec`` checked whole and baked (:func:`study_problems`); :class:`StudyInvalid` with
    every problem otherwise."""
    problems, baked = study_problems(spec, stored, request=request)
    if problems:
        raise StudyInvalid(problems)
    return baked


__all__ = ["StudyInvalid", "cell_functions", "prepare", "stored_names", "study_problems"]
