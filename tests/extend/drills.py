"""The extension drills: what docs/architecture.md's "How to extend normfree" promises, done.

Each :class:`Drill` makes one extension the way a maintainer would, in a scratch copy of the
checkout (``scratch.py``): it edits exactly the files the doc's section lists on its ``Files:``
line, then runs checks in the copy that pass only if the extension works end to end and the
existing tests cover it unchanged: they must run tests of the new row (:data:`TESTS_OF`), not
merely pass. A drill that needed another file fails its checks; a doc that lists a file the
drill does not touch (or misses one it does) fails the comparison.

The preset and study-kind drills are in ``drills_registry.py``; another extension is one more
``Drill`` whose ``section`` is the doc's heading.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.extend.scratch import ROOT, insert_before

DOC = ROOT / "docs" / "architecture.md"
EXTEND_HEADING = "## How to extend normfree"


@dataclass(frozen=True)
class Drill:
    """One extension: ``edits`` (path -> change of its text) and the ``checks`` run after them
    in the scratch copy (each the arguments of one ``python`` process) under
    ``TRITON_INTERPRET=1`` (Triton on CPU), then the ``uninterpreted`` ones without it (the
    sm_90 compile, which an interpreter process cannot do)."""

    section: str  # the ``###`` heading under "How to extend normfree"
    edits: dict[str, Callable[[str], str]]  # a path not in the checkout is a new file ("")
    checks: tuple[tuple[str, ...], ...]
    uninterpreted: tuple[tuple[str, ...], ...] = ()
    what: str = ""  # the test id ("" = the section)
    # (placeholder, value): the doc's ``<kind>`` in a path is this drill's new name
    placeholders: tuple[tuple[str, str], ...] = ()

    @classmethod
    def inserting(cls, section: str, path: str, anchor: str, text: str, **fields: Any) -> Drill:
        """The drill whose one edit puts ``text`` before ``anchor`` in ``path`` (a row of a
        table, an entry of a registry)."""
        return cls(section, {path: insert_before(anchor, text)}, **fields)

    def listed(self, doc: Path | None = None) -> set[str]:
        """The doc's ``Files:`` paths of this section, placeholders filled in."""
        out = set()
        for path in documented_files(self.section, doc or DOC):
            for key, value in self.placeholders:
                path = path.replace(key, value)
            out.add(path)
        return out


# ``python -c TESTS_OF NAME ARGS...``: pytest with ARGS, failing unless at least one test whose
# id names NAME ran, and every test that ran passed (a row the parametrised tests do not pick
# up would otherwise pass on the others alone).
TESTS_OF = """
import sys, pytest
name, args, ran = sys.argv[1], sys.argv[2:], []
class Count:
    def pytest_runtest_logreport(self, report):
        if report.when == "call" and name in report.nodeid:
            ran.append(report.outcome)
code = pytest.main(args, plugins=[Count()])
assert code == 0, f"pytest exit code {code}"
assert ran and set(ran) == {"passed"}, (name, ran)
print(f"{len(ran)} tests of {name} passed")
"""


def suite_of(name: str, k: str, *paths: str) -> tuple[str, ...]:
    """The check that runs ``pytest -k K PATHS`` through :data:`TESTS_OF` for ``name``."""
    return ("-c", TESTS_OF, name, "-q", "-p", "no:cacheprovider", "-k", k, *paths)


def lint(path: str) -> tuple[str, ...]:
    """The check that ``path`` still passes ruff after the drill's edit."""
    return ("-m", "ruff", "check", "--no-cache", path)


def documented_files(section: str, doc: Path = DOC) -> set[str]:
    """The backquoted paths on the ``Files:`` line of ``section`` in the doc."""
    text = doc.read_text()
    assert EXTEND_HEADING in text, f"{doc} has no {EXTEND_HEADING!r}"
    part = text.split(EXTEND_HEADING, 1)[1].split("\n## ", 1)[0]
    blocks = {b.split("\n", 1)[0].strip(): b for b in part.split("\n### ")[1:]}
    assert section in blocks, f"no section {section!r} in {sorted(blocks)}"
    lines = [line for line in blocks[section].splitlines() if line.startswith("Files:")]
    assert len(lines) == 1, f"section {section!r} needs exactly one 'Files:' line"
    return set(re.findall(r"`([^`]+)`", lines[0]))


# -- a primitive: two rows, each with helper code in every backend, made one at a time ---------
# softplus: sympy lacks it, so the row gives its derivative and the row makes the sympy node
SOFTPLUS_ROW = """    Primitive(
        # log(1 + e^x) = max(x, 0) + log1p(e^-|x|): never overflows
        "softplus", math=lambda v: max(v, 0.0) + math.log1p(math.exp(-abs(v))),
        numpy=Code("softplus", "def softplus(x):\\n    return np.logaddexp(0.0, x)\\n"),
        torch=Code("_softplus",
                   "def _softplus(x):\\n    return torch.logaddexp(x, torch.zeros_like(x))\\n"),
        triton=Code("_softplus", '''@triton.jit
def _softplus(x):
    return tl.maximum(x, 0.0) + _log1p(tl.exp(-tl.abs(x)))
''', (TRITON_LOG1P,)),
        c=Code("nf_softplus", '''static inline float nf_softplus(float x) {
    return (x > 0.0f ? x : 0.0f) + nf_log1p(nf_exp(-fabsf(x)));
}
''', (C_LOG1P, C_EXP)),
        mpmath=Code("softplus", "def softplus(x):\\n"
                    "    return mp.log1p(mp.exp(x)) if x < 0 else x + mp.log1p(mp.exp(-x))\\n"),
        derivative="(1 + tanh(u/2))/2",
    ),
"""

# sech: sympy has it (its derivative, parity and limits are sympy's), numpy and torch do not
SECH_ROW = """    Primitive(
        # 2e / (1 + e^2), e = exp(-|x|): never overflows
        "sech", math=lambda v: 2 * math.exp(-abs(v)) / (1 + math.exp(-2 * abs(v))),
        numpy=Code("sech", "def sech(x):\\n    return 1.0 / np.cosh(x)\\n"),
        torch=Code("_sech", "def _sech(x):\\n    return 1.0 / torch.cosh(x)\\n"),
        triton=Code("_sech", '''@triton.jit
def _sech(x):
    e = tl.exp(-tl.abs(x))
    return 2.0 * e / (1.0 + e * e)
'''),
        c=Code("nf_sech", '''static inline float nf_sech(float x) {
    float e = nf_exp(-fabsf(x));
    return 2.0f * e / (1.0f + e * e);
}
''', (C_EXP,)),
        mpmath="mpmath.sech", tails=Tails(1e4, 0.0, 0.0),
    ),
"""

# ``python -c PRIMITIVE_SCRIPT FORMULA EXPECT``: parse FORMULA, its properties (EXPECT: a Python
# condition on them, ``p``), every kernel backend against autograd through the row's torch
# column, and a real training step (a one-epoch vit-tiny trial) with it in every norm slot
PRIMITIVE_SCRIPT = """
import math, pathlib, sys, torch
from normfree.kernels import KernelOptions, pointwise_norm
from normfree.kernels.reference import reference_norm
from normfree.search_space import parse
from normfree.specs import NormSpec, TrialConfig
from normfree.workers.trainer import train_trial
formula, expect = sys.argv[1:3]
c = parse(formula)
p = c.properties
assert eval(expect, {"p": p, "abs": abs}), p
options = KernelOptions(cache=pathlib.Path(".cache/kernels"))
x = (3 * torch.randn(4, 33, dtype=torch.float64)).float()
params = [torch.tensor(0.8), torch.tensor(0.1), torch.rand(33) + 0.5, torch.randn(33)]
ref_leaves = [t.double().requires_grad_() for t in (x, *params)]
ref = reference_norm(ref_leaves[0], c.torch_fn(), *ref_leaves[1:])
ref_grads = torch.autograd.grad(ref.sum(), ref_leaves)
for backend in ("triton", "native", "torch"):
    leaves = [t.clone().requires_grad_() for t in (x, *params)]
    y = pointwise_norm(leaves[0], c, *leaves[1:], backend=backend, kernels=options)
    grads = torch.autograd.grad(y.sum(), leaves)
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=2e-5)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-3)
norm = NormSpec(name=formula, shift="scalar")
cfg = TrialConfig(proxy="vit-tiny", norm=norm, epochs=1,
                  overrides={"max_train": 256, "max_eval": 128})
result = train_trial(cfg, kernels=options)
assert result.status == "complete" and math.isfinite(result.metrics["train_loss"]), result
print("primitive drill ok")
"""

# ``python -c AOT_SCRIPT NAME``: the sm_90 compile (triton.compile for GPUTarget("cuda", 90, 32),
# no GPU) of a new entry or a new row's example, which tests/kernels/test_aot.py compiles
# unchanged (it compiles every name default_names() lists)
AOT_SCRIPT = """
import pathlib, sys
from normfree.kernels import KernelOptions
from normfree.kernels._aot import compile_report, default_names
name = sys.argv[1]
assert name in default_names(), default_names()
options = KernelOptions(cache=pathlib.Path(".cache/aot"))
report = compile_report([name], ["bf16"], 1024, options)
assert len(report["kernels"]) == 3 and all(r["cubin_bytes"] > 0 for r in report["kernels"])
print("sm_90 ok")
"""


def primitive_drill(name: str, row: str, formula: str, expect: str) -> Drill:
    """The primitive ``name`` added as ``row`` at the end of the table, run through
    :data:`PRIMITIVE_SCRIPT` on ``formula``, compiled for sm_90, and through the existing tests
    of every primitive, which must run tests of the new row."""
    table = "normfree/search_space/primitives.py"
    return Drill.inserting(
        "A primitive function", table, ")  # fmt: skip\nBY_NAME: dict[str, Primitive]", row,
        checks=(
            lint(table),
            ("-c", PRIMITIVE_SCRIPT, formula, expect),
            suite_of(name, f"{name} or derived", "tests/search_space/test_primitives.py",
                     "tests/kernels/test_printers.py", "tests/kernels/test_operator.py"),
        ),
        uninterpreted=(("-c", AOT_SCRIPT, f"{name}(u)"),),
        what=f"primitive {name}",
    )  # fmt: skip


SOFTPLUS = primitive_drill(
    "softplus", SOFTPLUS_ROW, "softplus(u) - log(2)",
    'p.zero_centred and p.monotone == "increasing" and p.growth == "linear"'
    " and abs(p.slope0 - 0.5) < 1e-12",
)  # fmt: skip
SECH = primitive_drill(
    "sech", SECH_ROW, "u*sech(u)",
    'p.odd and p.bounded and p.monotone == "neither" and abs(p.slope0 - 1) < 1e-12',
)  # fmt: skip


# -- a catalog entry: the Gudermannian function, scaled to (-1, 1) ----------------------------
ENTRY_LINE = """    Entry("gudermann", "transformed", "2/pi*atan(sinh(u))", "Gudermann (1830)",
          reference="(2 / pi) * arctan(sinh(u))"),
"""

ENTRY = Drill.inserting(
    "A candidate function", "normfree/search_space/catalog.py",
    "    # Growth-rate family: unbounded and unclipped.", ENTRY_LINE,
    checks=(
        lint("normfree/search_space/catalog.py"),
        suite_of("gudermann", "gudermann or every or papers or list or demo_json or nan_gradient",
                 "tests/search_space/test_catalog.py", "tests/search_space/test_derivative.py",
                 "tests/search_space/test_properties.py", "tests/kernels/test_operator.py",
                 "tests/cli/test_candidates.py"),
    ),
    uninterpreted=(("-c", AOT_SCRIPT, "gudermann"),),
    what="catalog entry gudermann",
)  # fmt: skip

DRILLS: tuple[Drill, ...] = (SOFTPLUS, SECH, ENTRY)
