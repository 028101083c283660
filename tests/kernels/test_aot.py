"""Every catalog candidate's kernels, and every primitive's (its row's example formula), compile
for Hopper (sm_90) with no GPU, and the forward's PTX moves each element of x and y exactly once
with 16-byte vector accesses.

Compilation runs in a child process without TRITON_INTERPRET (an interpreter process cannot
compile; see normfree/kernels/_aot.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from normfree.search_space import catalog
from normfree.search_space.primitives import PRIMITIVES
from tests.children import run_json


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["NORMFREE_KERNEL_CACHE"] = str(tmp_path_factory.mktemp("aot_cache"))
    args = ["-m", "normfree.kernels._aot", "--dtypes", "bf16", "--d", "1024"]
    return run_json(args, timeout=600, env=env, cwd=Path(__file__).parents[2])


def test_every_candidate_compiles_for_sm90(report: dict) -> None:
    compiled = {(r["name"], r["kernel"], r["affine"]) for r in report["kernels"]}
    for c in catalog.all():
        for key in ((c.name, "fwd", False), (c.name, "fwd", True), (c.name, "bwd", True)):
            assert key in compiled, key
    assert all(r["cubin_bytes"] > 0 for r in report["kernels"])
    assert report["target"] == "cuda:90"


def test_every_primitive_compiles_for_sm90(report: dict) -> None:
    """Each row's example formula, under its catalog name where an entry is that formula."""
    by_formula = {c.formula: c.name for c in catalog.all()}
    compiled = {(r["name"], r["kernel"]) for r in report["kernels"]}
    for prim in PRIMITIVES:
        name = by_formula.get(prim.formula, prim.formula)
        assert {(name, "fwd"), (name, "bwd")} <= compiled, prim.name


def test_forward_moves_each_element_once_vectorised(report: dict) -> None:
    for row in report["kernels"]:
        acc, vec = row["accesses"], row["expected_vector_accesses"]
        # 16-byte accesses only for the tensors; single words only for alpha (and a scalar s)
        assert acc["ld.v2"] == acc["st.v2"] == acc["st.scalar"] == 0, row
        assert acc["ld.scalar"] == 1 + (row["shift"] == "scalar"), row
        if row["kernel"] == "fwd":
            assert acc["st.v4"] == vec, row  # y once
            # x once; gamma and beta: one [BLOCK_N] fp32 vector each per program
            per_param = row["block_n"] * 4 // 16 // 128
            assert acc["ld.v4"] == vec + (2 * per_param if row["affine"] else 0), row
        else:
            assert acc["ld.v4"] >= 2 * vec and acc["st.v4"] >= vec, row  # x, dy in; dx out
