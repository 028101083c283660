"""The extension drills: what docs/architecture.md's "How to extend normfree" promises, done.

Each :class:`Drill` makes one extension the way a maintainer would, in a scratch copy of the
checkout (``scratch.py``): it edits exactly the files the doc's section lists on its ``Files:``
line, then runs checks in the copy that pass only if the extension works end to end and the
existing tests cover it unchanged. A drill that needed another file fails its checks; a doc
that lists a file the drill does not touch (or misses one it does) fails the comparison.

The preset and study-kind drills are in ``drills_registry.py``; another extension is one more
``Drill`` whose ``section`` is the doc's heading.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.extend.scratch import ROOT, insert_before

DOC = ROOT / "docs" / "architecture.md"
EXTEND_HEADING = "## How to extend normfree"


@dataclass(frozen=True)
class Drill:
    """One extension: ``edits`` (path -> change of its text) and the ``checks`` run after them
    in the scratch copy (each the arguments of one ``python`` process)."""

    section: str  # the ``###`` heading under "How to extend normfree"
    edits: dict[str, Callable[[str], str]]  # a path not in the checkout is a new file ("")
    checks: tuple[tuple[str, ...], ...]
    # (placeholder, value): the doc's ``<kind>`` in a path is this drill's new name
    placeholders: tuple[tuple[str, str], ...] = ()

    def listed(self, doc: Path | None = None) -> set[str]:
        """The doc's ``Files:`` paths of this section, placeholders filled in."""
        out = set()
        for path in documented_files(self.section, doc or DOC):
            for key, value in self.placeholders:
                path = path.replace(key, value)
            out.add(path)
        return out


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


# -- a primitive: softplus, which sympy lacks, with helper code in every backend --------------
SOFTPLUS_ROW = '''    Primitive(
        # log(1 + e^x) = max(x, 0) + log1p(e^-|x|): never overflows
        "softplus", math=lambda v: max(v, 0.0) + math.log1p(math.exp(-abs(v))),
        numpy=Code("softplus", "def softplus(x):\\n    return np.logaddexp(0.0, x)\\n"),
        torch=Code("_softplus",
                   "def _softplus(x):\\n    return torch.logaddexp(x, torch.zeros_like(x))\\n"),
        triton=Code("_softplus", """@triton.jit
def _softplus(x):
    return tl.maximum(x, 0.0) + _log1p(tl.exp(-tl.abs(x)))
""", (TRITON_LOG1P,)),
        c=Code("nf_softplus", """static inline float nf_softplus(float x) {
    return (x > 0.0f ? x : 0.0f) + nf_log1p(nf_exp(-fabsf(x)));
}
""", (C_LOG1P, C_EXP)),
        mpmath=Code("softplus", "def softplus(x):\\n"
                    "    return mp.log1p(mp.exp(x)) if x < 0 else x + mp.log1p(mp.exp(-x))\\n"),
        derivative="(1 + tanh(u/2))/2",
    ),
'''

# parse, properties, every kernel backend against autograd through the row's torch column, and
# a real training step (a one-epoch vit-tiny trial) with the new primitive in every norm slot
PRIMITIVE_SCRIPT = """
import math, pathlib, torch
from normfree.kernels import KernelOptions, pointwise_norm
from normfree.kernels.reference import reference_norm
from normfree.search_space import parse
from normfree.specs import NormSpec, TrialConfig
from normfree.workers.trainer import train_trial
c = parse("softplus(u) - log(2)")
p = c.properties
assert p.zero_centred and p.monotone == "increasing" and p.growth == "linear", p
assert abs(p.slope0 - 0.5) < 1e-12, p.slope0
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
norm = NormSpec(name="softplus(u) - log(2)", shift="scalar")
cfg = TrialConfig(proxy="vit-tiny", norm=norm, epochs=1,
                  overrides={"max_train": 256, "max_eval": 128})
result = train_trial(cfg, kernels=options)
assert result.status == "complete" and math.isfinite(result.metrics["train_loss"]), result
print("primitive drill ok")
"""

PRIMITIVE = Drill(
    section="A primitive function",
    edits={
        "normfree/search_space/primitives.py": insert_before(
            ")  # fmt: skip\nBY_NAME: dict[str, Primitive]", SOFTPLUS_ROW
        ),
    },
    checks=(
        ("-c", PRIMITIVE_SCRIPT),
        ("-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "softplus or derived",
         "tests/search_space/test_primitives.py", "tests/kernels/test_printers.py",
         "tests/kernels/test_operator.py"),
    ),
)  # fmt: skip


# -- a catalog entry: the Gudermannian function, scaled to (-1, 1) ----------------------------
ENTRY_LINE = """    Entry("gudermann", "transformed", "2/pi*atan(sinh(u))", "Gudermann (1830)",
          reference="(2 / pi) * arctan(sinh(u))"),
"""

ENTRY = Drill(
    section="A candidate function",
    edits={
        "normfree/search_space/catalog.py": insert_before(
            "    # Growth-rate family: unbounded and unclipped.", ENTRY_LINE
        ),
    },
    checks=(
        ("-m", "pytest", "-q", "-p", "no:cacheprovider", "-k",
         "gudermann or every or papers or list or demo_json or nan_gradient",
         "tests/search_space/test_catalog.py", "tests/search_space/test_derivative.py",
         "tests/search_space/test_properties.py", "tests/kernels/test_operator.py",
         "tests/cli/test_candidates.py"),
    ),
)  # fmt: skip

DRILLS: tuple[Drill, ...] = (PRIMITIVE, ENTRY)
