"""A formula's printed size and branch points, bounded before anything expensive runs.

The parser's limits (characters, nodes, depth, |exponent| <= 32) bound the *text*. Two things
grow much faster than the text and need their own bound:

- **Expanded size.** sympy merges integer powers of powers, so ``((tanh(u)**32)**32)**32`` is one
  node, ``tanh(u)**32768``. Every kernel printer writes an integer power as multiplications (the
  printed base appears ``n`` times: Triton and C have no fast integer ``pow``), so that node would
  print as 32,768 copies of ``tanh(u)``, and a six-level tower as a billion (gigabytes of C source).
  :func:`expanded_size` is the size of the text a printer would write, counted on the tree
  without building it; :func:`check_cost` refuses a formula (or its derivative) above
  :data:`MAX_EXPANDED_NODES`, before the derivative, the domain check or any printer runs.
- **Switches.** Every ``min``/``max`` argument, ``abs``, ``sign`` and ``clip`` is a point where f
  may switch branch; the exact derivative, the kink search and the smoothness properties each
  cost roughly quadratic time in their number (a ``max`` of six 8-way ``min`` groups took ~8 s of
  sympy). The parser counts them as it builds (:data:`MAX_SWITCHES`), so a long chain is refused
  before sympy compares its arguments.

Both limits sit far above every catalog entry (expanded size <= 60 for f', <= 11 switches) and the
generator's grammar, so they refuse only inputs built to be expensive.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from normfree.search_space.errors import ExpressionError

if TYPE_CHECKING:
    import sympy

# Nodes of the printed f or f' (one per operator, call, number or symbol occurrence). 8,000 nodes
# print as ~100-200 kB of C: a sub-second build; the catalog's largest is 60.
MAX_EXPANDED_NODES = 8_000
# min/max arguments, abs, sign and clip bounds in one formula (the catalog's most is 6).
MAX_SWITCHES = 16


def expanded_size(expr: sympy.Basic, limit: int = MAX_EXPANDED_NODES) -> int:
    """Size of ``expr`` as a printer writes it: integer powers repeat their base ``|n|`` times.

    Counted on the tree (memoised per distinct sub-expression, so the walk is linear in the
    DAG) and saturating just above ``limit``, so a tower never makes a huge integer either.
    Half-integer powers print ``sqrt(b) * b**k``; other constant powers as ``exp(p*log(b))``.
    """
    import sympy  # here: the parser's syntax pass reads MAX_SWITCHES without sympy

    cap = limit + 1
    memo: dict[sympy.Basic, int] = {}

    def size(e: sympy.Basic) -> int:
        hit = memo.get(e)
        if hit is not None:
            return hit
        if isinstance(e, sympy.Pow) and e.exp.is_Rational:
            n = abs(int(e.exp.p)) if e.exp.q == 1 else abs(int(e.exp.p)) // 2 + 1
            s = min(cap, 1 + max(1, n) * size(e.base))
        else:
            s = 1
            for a in e.args:
                s += size(a)
                if s >= cap:
                    s = cap
                    break
        memo[e] = s
        return s

    return size(expr)


def check_cost(expr: sympy.Basic, what: str = "the formula") -> None:
    """Refuse ``expr`` when its printed size would exceed :data:`MAX_EXPANDED_NODES`."""
    n = expanded_size(expr)
    if n > MAX_EXPANDED_NODES:
        raise ExpressionError(
            f"{what} is too large once powers are expanded: more than {MAX_EXPANDED_NODES} "
            "operations (nested integer powers multiply: (f**32)**32 is f**1024); "
            "use a smaller exponent or fewer nested powers"
        )


__all__ = ["MAX_EXPANDED_NODES", "MAX_SWITCHES", "check_cost", "expanded_size"]
