"""Generated hostile formulas (nested powers, compositions, long min/max chains) get an answer,
accepted or refused, with bounded time and memory.

Hypothesis builds the formula text here; a child process parses each one through the same
path a submission takes (parse, properties, then the C printer when accepted) and reports its
slowest answer and its peak RSS, so a formula that expands to gigabytes shows as memory, not as
a hung test. The bounds are generous (an unbounded input takes minutes and gigabytes, not
seconds and megabytes); speed itself is measured in bench/, not here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.children import run_json

CHILD = r"""
import json, sys, time
from normfree.search_space import ExpressionError, parse
from normfree.search_space._parser import U
from normfree.kernels._codegen import c_source

slowest, outcomes = 0.0, []
for text in json.load(sys.stdin):
    t0 = time.perf_counter()
    try:
        c = parse(text)
        c.properties
        c_source(c.expr, c.derivative, U, c.canonical)
        outcomes.append("accepted")
    except (ExpressionError, RecursionError) as exc:
        outcomes.append("refused")
    slowest = max(slowest, time.perf_counter() - t0)
# VmHWM is this program image's own peak: ru_maxrss survives execve, so in a child of a large
# test process it reports the parent's size at the fork, not what the parsing used
with open("/proc/self/status") as status:
    rss_mb = next(int(l.split()[1]) for l in status if l.startswith("VmHWM:")) / 1024
print(json.dumps({"slowest_s": slowest, "rss_mb": rss_mb, "outcomes": outcomes}))
"""

LEAVES = st.sampled_from(["u", "tanh(u)", "erf(u)", "sin(u)", "abs(u)", "0.5", "u+1"])
FUNCS = st.sampled_from(["tanh", "erf", "atan", "sin", "exp", "abs", "asinh", "softsign"])


def _extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    power = st.tuples(inner, st.integers(2, 32)).map(lambda t: f"({t[0]})**{t[1]}")
    call = st.tuples(FUNCS, inner).map(lambda t: f"{t[0]}({t[1]})")
    chain = st.tuples(st.sampled_from(["min", "max"]), st.lists(inner, min_size=2, max_size=8))
    minmax = chain.map(lambda t: f"{t[0]}({','.join(t[1])})")
    arith = st.tuples(inner, st.sampled_from(["+", "*", "-"]), inner).map(
        lambda t: f"({t[0]}){t[1]}({t[2]})"
    )
    return st.one_of(power, call, minmax, arith)


FORMULAS = st.recursive(LEAVES, _extend, max_leaves=24).filter(lambda s: len(s) <= 1000)

# Known worst cases from issue 16, in every batch.
WORST = [
    "((((((tanh(u)**32)**32)**32)**32)**32)**32)",
    "max(" + ",".join(f"min(u+{i},sin(u+{i}),tanh(u+{i}),erf(u+{i}))" for i in range(6)) + ")",
    "((((tanh(u)**32+1)**32+1)**32+1)**32)",
]


@settings(
    max_examples=2,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(st.lists(FORMULAS, min_size=6, max_size=6))
def test_generated_formulas_answer_in_bounded_time_and_memory(formulas: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    report = run_json(["-c", CHILD], timeout=300, input=json.dumps(WORST + formulas), env=env)
    assert report["outcomes"][:3] == ["refused"] * 3
    assert report["slowest_s"] < 30.0, report
    assert report["rss_mb"] < 1500, report
