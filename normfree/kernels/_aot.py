"""Ahead-of-time compilation of the generated kernels for a GPU that is not here.

``triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))`` runs Triton's whole NVIDIA
pipeline (TTIR -> TTGIR -> LLVM -> PTX -> cubin through the ``ptxas`` shipped in the wheel) with no
GPU present. The tests use it to prove that the kernels of every candidate and every primitive
(:func:`default_names`) compile for Hopper and that the forward's PTX moves each element of x and
y exactly once with 16-byte vector accesses.

Argument specialisation mirrors what Triton's JIT does at launch for the shapes the GPU benchmark
uses: pointers 16-byte aligned, ``D`` and the row strides divisible by 16, ``M`` unconstrained.

A process running Triton's interpreter cannot compile: ``triton.language``'s own ``@jit`` helpers
(``tl.sum``, ``cdiv``, ...) were created as interpreter objects when it was imported. The tests,
which run under ``TRITON_INTERPRET=1``, therefore call ``python -m normfree.kernels._aot`` in a
child process without it; that entry point prints one JSON report.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

import triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from normfree.kernels._ops import CompiledOperator
from normfree.kernels._options import KernelOptions
from normfree.kernels._triton_ops import blocks

DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2}


def compilable_module(op: CompiledOperator) -> ModuleType:
    """The generated Triton module; refuses under the interpreter (see the module docstring)."""
    if knobs.runtime.interpret:
        raise RuntimeError("AOT compilation needs a process without TRITON_INTERPRET=1")
    return op.triton_module


@dataclass(frozen=True)
class AotResult:
    kernel: str
    dtype: str
    ptx: str
    cubin_bytes: int
    block_m: int
    block_n: int
    num_warps: int

    def global_accesses(self) -> dict[str, int]:
        """Global loads/stores in the PTX by kind.

        ``ld.v4``/``st.v4`` are 16-byte vector accesses (the tensors), ``ld.scalar`` single-word
        loads (alpha, a scalar s), ``ld.table`` read-only (``.nc``) scalar loads, which libdevice's
        sin/cos issue for their argument-reduction table, not for x.
        """
        counts = dict.fromkeys(("ld.v4", "ld.v2", "ld.scalar", "ld.table", "st.v4", "st.v2",
                                "st.scalar"), 0)  # fmt: skip
        for line in self.ptx.splitlines():
            match = re.search(r"\b(ld|st)\.global\S*", line)
            if match is None:
                continue
            text = match.group(0)
            width = "v4" if ".v4" in text else "v2" if ".v2" in text else None
            if width is None and text.startswith("ld") and ".nc" in text:
                counts["ld.table"] += 1
            else:
                counts[f"{match.group(1)}.{width or 'scalar'}"] += 1
        return counts


def aot_compile(
    op: CompiledOperator,
    kernel: Literal["fwd", "bwd"] = "fwd",
    dtype: str = "bf16",
    *,
    d: int = 1024,
    shift: Literal["none", "scalar", "channel"] = "scalar",
    affine: bool = True,
    arch: int = 90,
    num_warps: int = 4,
) -> AotResult:
    """Compile one generated kernel to PTX and cubin for ``sm_<arch>`` without a GPU."""
    module = compilable_module(op)
    fn = module._fwd_kernel if kernel == "fwd" else module._bwd_kernel
    block_m, block_n = blocks(d)
    ptr = f"*{dtype}"
    if kernel == "fwd":
        types: dict[str, str] = {
            "X": ptr, "Y": ptr, "ALPHA": "*fp32", "S": "*fp32", "GAMMA": "*fp32",
            "BETA": "*fp32", "M": "i32", "D": "i32", "stride_xm": "i32", "stride_ym": "i32",
        }  # fmt: skip
    else:
        types = {
            "X": ptr, "DY": ptr, "DX": ptr, "ALPHA": "*fp32", "S": "*fp32", "GAMMA": "*fp32",
            "P_DALPHA": "*fp32", "P_DS": "*fp32", "P_DGAMMA": "*fp32", "P_DBETA": "*fp32",
            "M": "i32", "D": "i32", "stride_xm": "i32", "stride_dym": "i32", "stride_dxm": "i32",
            "rows_per_program": "i32",
        }  # fmt: skip
    constexprs: dict[str, Any] = {
        "HAS_S": shift != "none",
        "S_PER_CHANNEL": shift == "channel",
        "HAS_AFFINE": affine,
        "BLOCK_M": block_m,
        "BLOCK_N": block_n,
    }
    signature = {name: types.get(name, "constexpr") for name in fn.arg_names}
    aligned = {n for n, t in types.items() if t.startswith("*")}
    aligned |= {"D", "stride_xm", "stride_ym", "stride_dym", "stride_dxm", "rows_per_program"}
    attrs = {
        (i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names) if name in aligned
    }
    target = GPUTarget("cuda", arch, 32)
    options = triton.compiler.make_backend(target).parse_options({"num_warps": num_warps})
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    compiled = triton.compile(source, target=target, options=options.__dict__)
    return AotResult(
        kernel, dtype, compiled.asm["ptx"], len(compiled.asm["cubin"]), block_m, block_n, num_warps
    )


def expected_vector_accesses(result: AotResult) -> int:
    """16-byte accesses per thread needed to move one [BLOCK_M, BLOCK_N] tile of x exactly once."""
    per_thread = result.block_m * result.block_n // (32 * result.num_warps)
    return per_thread * DTYPES[result.dtype] // 16


# (kernel, affine, shift): the bare forward (only x in, y out) pins the exact access count; the
# full forward and backward prove the variants the models use compile.
VARIANTS: tuple[tuple[Literal["fwd", "bwd"], bool, Literal["none", "scalar", "channel"]], ...] = (
    ("fwd", False, "none"),
    ("fwd", True, "scalar"),
    ("bwd", True, "scalar"),
)


def default_names() -> list[str]:
    """Every catalog entry, then every primitive's example formula that no entry already is:
    what the sm_90 test compiles, so a new entry or primitive row is compiled with no edit."""
    from normfree.search_space import catalog
    from normfree.search_space.primitives import PRIMITIVES

    entries = {c.formula for c in catalog.all()}
    examples = [p.formula for p in PRIMITIVES if p.formula not in entries]
    return [*catalog.names(), *dict.fromkeys(examples)]


def compile_report(
    names: list[str], dtypes: list[str], d: int, options: KernelOptions
) -> dict[str, Any]:
    """Every variant of each name's kernels compiled for sm_90, with its PTX's access counts."""
    from normfree.kernels._ops import compile_candidate
    from normfree.search_space import catalog

    rows = []
    for name in names:
        op = compile_candidate(catalog.resolve(name), options)
        for dtype in dtypes:
            for kernel, affine, shift in VARIANTS:
                started = time.perf_counter()
                res = aot_compile(op, kernel, dtype, d=d, affine=affine, shift=shift)
                rows.append({
                    "name": name, "kernel": kernel, "dtype": dtype, "d": d,
                    "affine": affine, "shift": shift,
                    "block_m": res.block_m, "block_n": res.block_n,
                    "cubin_bytes": res.cubin_bytes, "accesses": res.global_accesses(),
                    "expected_vector_accesses": expected_vector_accesses(res),
                    "seconds": round(time.perf_counter() - started, 3),
                })  # fmt: skip
    return {"target": "cuda:90", "triton": triton.__version__, "kernels": rows}


def main(argv: list[str] | None = None) -> None:
    """``python -m normfree.kernels._aot [--names a,b] [--dtypes bf16,fp32] [--d 1024]``."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument(
        "--names",
        default="",
        help="comma-separated names or formulas; default: the catalog and every primitive's "
        "example formula (default_names)",
    )
    parser.add_argument("--dtypes", default="bf16")
    parser.add_argument("--d", type=int, default=1024)
    args = parser.parse_args(argv)
    from normfree.settings import get_settings

    names = [n for n in args.names.split(",") if n] or default_names()
    options = KernelOptions.from_settings(get_settings())  # an entry point: it reads settings
    print(json.dumps(compile_report(names, args.dtypes.split(","), args.d, options)))


if __name__ == "__main__":
    main()
