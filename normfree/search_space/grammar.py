"""A grammar over the expression language: sample, mutate and recombine function expressions.

What the generative study (``workers.generate``) evolves. Genotypes are sympy trees in :data:`U`
built only with the constructors the parser itself uses, from a fixed set of productions:

- terminals: ``u`` and constants (short exact rationals, so canonical forms stay exact);
- unary: the primitives the primitives table proposes (erf, tanh, atan, asinh, sin, exp, abs,
  sign), negation, square, cube, sqrt|.|, log(1 + |.|), softsign, clip, Gaussian bump;
- binary: +, -, *, protected division ``a/(1 + |b|)`` (never a pole), min, max.

Limits: a sympy node count (``max_size``) and tree depth (``max_depth``) far below the parser's
own (:data:`MAX_NODES`, :data:`MAX_DEPTH`), and every tree must depend on ``u``.

Why sympy trees and not a private tree type: sympy's automatic canonicalisation keeps genotypes
small (``u + u`` is ``2*u``), the catalog's 24 functions can seed or cross over with generated
ones as they are, and a mutation edits the very tree the kernels will compile. The price is that
a rebuilt node may re-canonicalise into something outside the language (``zoo``, a complex
constant, a variable exponent); :func:`to_text` and :func:`realize` reject those with
:class:`ExpressionError`, so the one door into the rest of normfree stays :func:`parse`: every
generated expression is printed as formula text and parsed back, passing exactly the checks a
user's formula passes (node set, domain, exact derivative), or it is rejected cleanly.

All randomness comes from a caller's ``random.Random``: a seed reproduces a whole search.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction

import sympy

from normfree.search_space._parser import U
from normfree.search_space._syntax import MAX_DEPTH, MAX_EXPONENT, MAX_NODES
from normfree.search_space.candidate import Candidate, parse
from normfree.search_space.errors import ExpressionError
from normfree.search_space.primitives import PRIMITIVES, heads

__all__ = [
    "BINARY",
    "MUTATIONS",
    "UNARY",
    "Grammar",
    "GrammarLimits",
    "Production",
    "depth",
    "realize",
    "size",
    "to_text",
]

Path = tuple[int, ...]
_HALF = sympy.Rational(1, 2)


@dataclass(frozen=True)
class Production:
    """One grammar production: ``build(*children)`` makes the sympy node(s)."""

    name: str
    arity: int
    build: Callable[..., sympy.Expr]
    weight: float = 1.0


# The primitives the table marks for proposal (``Primitive.propose``: erf, tanh, atan, asinh,
# sin, exp, abs, sign), in table order, then the compound productions.
UNARY: tuple[Production, ...] = (
    *(Production(p.name, 1, p.sympy, p.propose) for p in PRIMITIVES if p.propose > 0),
    Production("neg", 1, lambda a: -a, 0.7),
    Production("square", 1, lambda a: a**2, 0.5),
    Production("cube", 1, lambda a: a**3, 0.3),
    Production("sqrtabs", 1, lambda a: sympy.Abs(a) ** _HALF, 0.5),
    Production("log1pabs", 1, lambda a: sympy.log(1 + sympy.Abs(a)), 0.7),
    Production("softsign", 1, lambda a: a / (1 + sympy.Abs(a)), 1.0),
    Production("clip", 1, lambda a: sympy.Min(sympy.Max(a, -1), 1), 0.7),
    Production("gauss", 1, lambda a: sympy.exp(-(a**2)), 0.4),
)
BINARY: tuple[Production, ...] = (
    Production("add", 2, lambda a, b: a + b, 1.5),
    Production("sub", 2, lambda a, b: a - b, 1.0),
    Production("mul", 2, lambda a, b: a * b, 1.5),
    Production("pdiv", 2, lambda a, b: a / (1 + sympy.Abs(b)), 0.7),
    Production("min", 2, sympy.Min, 0.3),
    Production("max", 2, sympy.Max, 0.3),
)
# Heads a point mutation may swap for one another (same arity, one sympy class each): the
# proposed primitives.
_SWAPPABLE: tuple[type, ...] = heads(lambda p: p.propose > 0)
MUTATIONS: tuple[str, ...] = ("point", "subtree", "constant", "wrap", "shrink")

# Constants: magnitudes drawn log-uniformly in [0.1, 4], kept to two significant digits.
_CONST_LO, _CONST_HI = 0.1, 4.0


@dataclass(frozen=True)
class GrammarLimits:
    """Bounds on generated trees (sympy nodes and depth), well inside the parser's limits."""

    max_size: int = 24
    max_depth: int = 6
    p_constant: float = 0.25  # a terminal is a constant rather than u
    p_leaf: float = 0.3  # at each level above the depth limit, stop with a terminal

    def __post_init__(self) -> None:
        if not 3 <= self.max_size <= MAX_NODES // 2:
            raise ValueError(f"max_size must be in [3, {MAX_NODES // 2}]")
        if not 2 <= self.max_depth <= MAX_DEPTH // 4:
            raise ValueError(f"max_depth must be in [2, {MAX_DEPTH // 4}]")
        for name in ("p_constant", "p_leaf"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1)")


# ------------------------------------------------------------------------------ tree helpers


def size(expr: sympy.Basic) -> int:
    """sympy nodes in ``expr``."""
    return sum(1 for _ in sympy.preorder_traversal(expr))


def depth(expr: sympy.Basic) -> int:
    """Height of the sympy tree (an atom is 1)."""
    if not expr.args:
        return 1
    return 1 + max(depth(a) for a in expr.args)


def _positions(
    expr: sympy.Basic, path: Path = (), in_exponent: bool = False
) -> Iterator[tuple[Path, sympy.Basic, bool]]:
    """Every node with its path and whether it sits in a power's exponent (constants only)."""
    yield path, expr, in_exponent
    for i, arg in enumerate(expr.args):
        exponent = in_exponent or (isinstance(expr, sympy.Pow) and i == 1)
        yield from _positions(arg, (*path, i), exponent)


def _at(expr: sympy.Basic, path: Path) -> sympy.Basic:
    for i in path:
        expr = expr.args[i]
    return expr


def _replace(expr: sympy.Basic, path: Path, new: sympy.Basic) -> sympy.Expr:
    """``expr`` with the node at ``path`` replaced (ancestors rebuilt, so sympy re-canonicalises).

    Rebuilding can fail or leave the language (``Pow(0, -1)`` is ``zoo``); both surface as
    :class:`ExpressionError`, here or in :func:`to_text`.
    """
    if not path:
        return new  # type: ignore[return-value]
    i, rest = path[0], path[1:]
    args = list(expr.args)
    args[i] = _replace(args[i], rest, new)
    try:
        return expr.func(*args)
    except (TypeError, ValueError, ZeroDivisionError, ArithmeticError) as exc:
        raise ExpressionError(f"rebuilding {expr.func.__name__} failed: {exc}") from None


def _is_constant(node: sympy.Basic) -> bool:
    return isinstance(node, sympy.Rational) and node not in (sympy.S.One, sympy.S.NegativeOne)


# ------------------------------------------------------------------------------ printing


# The language's name of every head ``to_text`` prints (search_space.primitives, min and max).
_NAMES: dict[type, str] = {
    **{p.sympy: p.name for p in PRIMITIVES},
    sympy.Min: "min",
    sympy.Max: "max",
}


def _number(value: sympy.Basic) -> str:
    if isinstance(value, sympy.Integer):
        return str(int(value)) if value >= 0 else f"({int(value)})"
    if isinstance(value, sympy.Rational):
        return f"({int(value.p)}/{int(value.q)})"
    if isinstance(value, sympy.Float):
        text = repr(float(value))
        return f"({text})" if text.startswith("-") else text
    raise ExpressionError(f"{value} is not a number of the expression language")


def to_text(expr: sympy.Basic) -> str:
    """The formula text of a sympy tree in the expression language (fully parenthesised).

    Only the nodes the language can spell are printed; anything else (``zoo``, ``I``, NaN,
    Piecewise, an unknown function) raises :class:`ExpressionError`.
    """
    if expr is U:
        return "u"
    if expr is sympy.pi:
        return "pi"
    if expr is sympy.E:
        return "e"
    if isinstance(expr, sympy.Number):
        if not expr.is_finite or not expr.is_real:
            raise ExpressionError(f"{expr} is not a finite real constant")
        return _number(expr)
    if isinstance(expr, sympy.Add):
        return "(" + " + ".join(to_text(a) for a in expr.args) + ")"
    if isinstance(expr, sympy.Mul):
        return "(" + "*".join(to_text(a) for a in expr.args) + ")"
    if isinstance(expr, sympy.Pow):
        if expr.exp.free_symbols:
            raise ExpressionError("a generated power has a variable exponent")
        if expr.base is sympy.E:
            return f"exp({to_text(expr.exp)})"
        return f"({to_text(expr.base)})^{to_text(expr.exp)}"
    name = _NAMES.get(type(expr))
    if name is None:
        raise ExpressionError(f"{type(expr).__name__} is not part of the expression language")
    return f"{name}({', '.join(to_text(a) for a in expr.args)})"


def realize(expr: sympy.Basic, name: str | None = None) -> Candidate:
    """A validated :class:`Candidate` from a generated tree: print it, parse it back.

    Raises :class:`ExpressionError` for anything :func:`parse` would refuse (a pole, NaN on part
    of the line, a constant out of range) and for trees the language cannot spell.
    """
    if not isinstance(expr, sympy.Expr) or not expr.has(U):
        raise ExpressionError("a generated function must depend on u")
    return parse(to_text(expr), name=name)


# ------------------------------------------------------------------------------ the grammar


class Grammar:
    """Sampling, mutation and crossover of sympy trees over fixed primitives and limits.

    Every method returns a tree within the limits or raises :class:`ExpressionError`; none
    guarantees the tree is a valid candidate (a domain or derivative check can still refuse
    it), which is :func:`realize`'s job.
    """

    def __init__(
        self,
        limits: GrammarLimits | None = None,
        *,
        unary: tuple[Production, ...] = UNARY,
        binary: tuple[Production, ...] = BINARY,
    ) -> None:
        self.limits = limits or GrammarLimits()
        if not unary or not binary:
            raise ValueError("a grammar needs unary and binary productions")
        self.unary = unary
        self.binary = binary

    # -- checks -------------------------------------------------------------------------------
    def check(self, expr: sympy.Basic) -> sympy.Expr:
        """``expr`` if it is within the limits and depends on u, else :class:`ExpressionError`."""
        if not isinstance(expr, sympy.Expr) or not expr.has(U):
            raise ExpressionError("a generated function must depend on u")
        n, d = size(expr), depth(expr)
        if n > self.limits.max_size:
            raise ExpressionError(f"generated tree too large: {n} > {self.limits.max_size} nodes")
        if d > self.limits.max_depth:
            raise ExpressionError(f"generated tree too deep: {d} > {self.limits.max_depth}")
        return expr

    # -- sampling -----------------------------------------------------------------------------
    def constant(self, rng: random.Random) -> sympy.Rational:
        """A short exact constant: two significant digits, magnitude in [0.1, 4], either sign."""
        mag = _CONST_LO * (_CONST_HI / _CONST_LO) ** rng.random()
        value = float(f"{mag:.2g}") * (1 if rng.random() < 0.75 else -1)
        return sympy.Rational(Fraction(str(value)))

    def terminal(self, rng: random.Random) -> sympy.Expr:
        return self.constant(rng) if rng.random() < self.limits.p_constant else U

    def _pick(self, rng: random.Random, prims: tuple[Production, ...]) -> Production:
        return rng.choices(prims, weights=[p.weight for p in prims])[0]

    def grow(self, rng: random.Random, max_depth: int) -> sympy.Expr:
        """A random tree of at most ``max_depth`` grammar levels ("grow" initialisation)."""
        if max_depth <= 1 or rng.random() < self.limits.p_leaf:
            return self.terminal(rng)
        if rng.random() < 0.55:
            return self._pick(rng, self.unary).build(self.grow(rng, max_depth - 1))
        prim = self._pick(rng, self.binary)
        return prim.build(self.grow(rng, max_depth - 1), self.grow(rng, max_depth - 1))

    def sample(self, rng: random.Random, attempts: int = 100) -> sympy.Expr:
        """A random tree within the limits that depends on u (a fresh individual)."""
        for _ in range(attempts):
            try:
                # Grammar levels are not sympy levels (a - b is Add(a, Mul(-1, b))): grow
                # shallower than the limit, then check the real tree.
                return self.check(self.grow(rng, max(2, self.limits.max_depth - 2)))
            except ExpressionError:
                continue
        raise ExpressionError(f"no tree within the limits after {attempts} attempts")

    # -- variation ----------------------------------------------------------------------------
    def mutate(
        self, expr: sympy.Expr, rng: random.Random, kind: str | None = None
    ) -> tuple[sympy.Expr, str]:
        """One random edit of ``expr``; returns (child, the mutation's name in :data:`MUTATIONS`).

        ``point`` swaps a function head (erf -> tanh, min <-> max, + <-> *), ``subtree`` replaces
        a subtree with a fresh one, ``constant`` perturbs a constant (or scales a subtree when
        there is none), ``wrap`` puts a unary primitive around a subtree, ``shrink`` replaces a
        node by one of its children. A kind with nothing to act on falls back to ``subtree``.
        """
        kind = kind or rng.choice(MUTATIONS)
        if kind not in MUTATIONS:
            raise ValueError(f"unknown mutation {kind!r}; choose from {MUTATIONS}")
        nodes = list(_positions(expr))
        free = [(p, n) for p, n, in_exp in nodes if not in_exp]
        child: sympy.Expr | None = None
        if kind == "point":
            heads = [(p, n) for p, n in free if isinstance(n, (*_SWAPPABLE, sympy.Min, sympy.Max))]
            heads += [(p, n) for p, n in free if isinstance(n, sympy.Add | sympy.Mul)]
            if heads:
                path, node = rng.choice(heads)
                child = _replace(expr, path, self._swap_head(node, rng))
        elif kind == "constant":
            consts = [(p, n) for p, n, _ in nodes if _is_constant(n)]
            if consts:
                path, node = rng.choice(consts)
                child = _replace(expr, path, self._perturb(node, rng))
            else:
                path, node = rng.choice(free)
                child = _replace(expr, path, self.constant(rng) * node)
        elif kind == "wrap":
            path, node = rng.choice(free)
            child = _replace(expr, path, self._pick(rng, self.unary).build(node))
        elif kind == "shrink":
            inner = [(p, n) for p, n in free if any(a.has(U) for a in n.args)]
            if inner:
                path, node = rng.choice(inner)
                child = _replace(expr, path, rng.choice([a for a in node.args if a.has(U)]))
        if child is None:
            kind = "subtree"
            path, _ = rng.choice(free)
            child = _replace(expr, path, self.grow(rng, 3))
        return self.check(child), kind

    def crossover(self, a: sympy.Expr, b: sympy.Expr, rng: random.Random) -> sympy.Expr:
        """``a`` with a random subtree replaced by a random u-dependent subtree of ``b``."""
        targets = [p for p, _, in_exp in _positions(a) if not in_exp]
        donors = [n for _, n, in_exp in _positions(b) if not in_exp and n.has(U)]
        return self.check(_replace(a, rng.choice(targets), rng.choice(donors)))

    def _swap_head(self, node: sympy.Basic, rng: random.Random) -> sympy.Expr:
        if isinstance(node, sympy.Min):
            return sympy.Max(*node.args)
        if isinstance(node, sympy.Max):
            return sympy.Min(*node.args)
        if isinstance(node, sympy.Add):
            return sympy.Mul(*node.args)
        if isinstance(node, sympy.Mul):
            return sympy.Add(*node.args)
        head = rng.choice([h for h in _SWAPPABLE if not isinstance(node, h)])
        return head(*node.args)

    def _perturb(self, value: sympy.Rational, rng: random.Random) -> sympy.Rational:
        """A multiplicative log-normal step (sigma 0.4), sign flip 1 in 10, two digits kept."""
        new = float(value) * 2.718281828459045 ** rng.gauss(0.0, 0.4)
        if rng.random() < 0.1:
            new = -new
        new = float(f"{new:.2g}")
        if new == 0 or abs(new) > MAX_EXPONENT:
            raise ExpressionError("perturbed constant out of range")
        return sympy.Rational(Fraction(str(new)))
