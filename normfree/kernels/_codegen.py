"""Module sources generated from one expression and its derivative.

Three sources per candidate, all from the same ``(f, f')`` pair through :func:`cse_lines`:

- torch: ``f(u)`` and ``f_and_df(u)`` over tensors; the operator math around them (``alpha*x+s``,
  the affine, the reductions) is ordinary code in :mod:`normfree.kernels._torch_ops`.
- Triton: ``_f`` / ``_f_df`` as ``@triton.jit`` device functions, the helpers they call, and the
  ``_fwd_kernel`` / ``_bwd_kernel`` templates below. The templates are the same for every
  candidate; only the device functions differ.

Kernel rules (grid, reduction, dtype), stated once:

- A 2-D view ``[M, D]`` of the input (unit column stride, any row stride). Forward grid
  ``(cdiv(M, BLOCK_M), cdiv(D, BLOCK_N))``: each program loads a ``[BLOCK_M, BLOCK_N]`` tile of x
  once, computes in fp32 and stores y once in y's dtype; gamma/beta/s are loaded once per program.
- Backward grid ``(P, cdiv(D, BLOCK_N))``: program ``(p, n)`` walks ``rows_per_program`` rows in
  steps of BLOCK_M, writes dx, and keeps fp32 per-column partial sums of the four parameter
  gradients in registers. It stores them to ``[P, D]`` buffers, and the host finishes the sums:
  deterministic, no atomics. ``f`` and ``f'`` are recomputed from x (nothing but x is saved).
- Offsets are int64 (M * D may exceed 2^31).
- C (the native CPU path, :mod:`normfree.kernels._native`): ``nf_f`` / ``nf_f_df`` as inline C
  functions and the two loops of :data:`C_KERNELS`, over a contiguous fp32 ``[M, D]`` row range
  so the host can split rows across threads. ``s``, ``gamma``, ``beta`` always arrive as ``[D]``
  arrays (the host expands a scalar ``s`` and fills 1/0 for a missing affine): one loop body for
  every option, at the cost of one multiply-add. Backward writes dx and accumulates per-channel
  partials of d_s, d_gamma, d_beta and a double d_alpha into per-thread buffers.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import sympy

from normfree.kernels._printers import CPrinter, TorchPrinter, TritonPrinter, cse_lines

_PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the normfree package


def _module_file(name: str) -> Path | None:
    """The source file of module ``name`` of this package (None: not a normfree module)."""
    parts = name.split(".")
    if parts[0] != "normfree":
        return None
    base = _PACKAGE_ROOT.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def generator_sources() -> list[Path]:
    """Every file whose code can change a generated kernel: this module (the templates) and
    every normfree module it imports, transitively, wherever the import statement sits (the
    printers, the primitives table with its helper code and fits, the parser a row-made sympy
    function differentiates with). Package ``__init__`` files are not followed: importing a
    submodule runs them, but they define no code a kernel contains."""
    seen: dict[Path, None] = {}
    todo = [Path(__file__).resolve()]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen[path] = None
        package = ".".join(path.relative_to(_PACKAGE_ROOT.parent).parent.parts)
        for name in imported_modules(ast.parse(path.read_text(), str(path)), package):
            found = _module_file(name)
            if found is not None and found.name != "__init__.py":
                todo.append(found)
    return sorted(seen)


def imported_modules(tree: ast.AST, package: str) -> list[str]:
    """The dotted names an import statement anywhere in ``tree`` may load, relative imports
    resolved against ``package`` (the module's own package): ``from a import b`` names both
    ``a`` and ``a.b``, since b may be a submodule or a name defined in a."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            names += [f"{base}.{alias.name}" for alias in node.names] + [base]
    return names


# Part of every cache key: the manual version, plus a digest of every source that shapes a
# kernel (:func:`generator_sources`), so an edited printer, template or primitive never reuses
# files written by an older one.
GENERATOR_VERSION = (
    "4+"
    + hashlib.sha256(
        b"".join(
            p.relative_to(_PACKAGE_ROOT).as_posix().encode() + b"\0" + p.read_bytes()
            for p in generator_sources()
        )
    ).hexdigest()[:8]
)


def _function(
    printer: TorchPrinter | TritonPrinter,
    name: str,
    outputs: dict[str, sympy.Expr],
    variable: sympy.Symbol,
    decorator: str,
    broadcast: str,
) -> str:
    lines, printed = cse_lines(printer, outputs)
    results = []
    for key, expr in outputs.items():
        text = printed[key]
        if not expr.has(variable):  # a constant (e.g. the slope of linear): give it u's shape
            text = broadcast.format(value=text)
        results.append(text)
    body = "\n".join([*lines, f"    return {', '.join(results)}"])
    return f"{decorator}def {name}(u):\n{body}\n"


def _header(title: str, canonical: str, expr: sympy.Expr, derivative: sympy.Expr) -> str:
    return (
        f'"""{title} generated by normfree.kernels (generator v{GENERATOR_VERSION}).\n\n'
        f"canonical: {canonical}\n"
        f"f(u)  = {sympy.sstr(expr)}\n"
        f"f'(u) = {sympy.sstr(derivative)}\n"
        'Do not edit: the cache regenerates this file from the expression."""\n'
    )


def torch_source(expr: sympy.Expr, derivative: sympy.Expr, variable: sympy.Symbol, canonical: str):
    """Python source of ``f(u)`` and ``f_and_df(u)`` over torch tensors."""
    printer = TorchPrinter(variable)
    fn = _function(printer, "f", {"f": expr}, variable, "", "torch.full_like(u, {value})")
    both = _function(
        printer,
        "f_and_df",
        {"f": expr, "df": derivative},
        variable,
        "",
        "torch.full_like(u, {value})",
    )
    helpers = printer.helper_source()
    return (
        _header("Torch functions", canonical, expr, derivative)
        + "\nimport torch\n\n\n"
        + (helpers + "\n\n" if helpers else "")
        + fn
        + "\n\n"
        + both
    )


FWD_KERNEL = '''
@triton.jit
def _fwd_kernel(
    X, Y, ALPHA, S, GAMMA, BETA,
    M, D, stride_xm, stride_ym,
    HAS_S: tl.constexpr, S_PER_CHANNEL: tl.constexpr, HAS_AFFINE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """y = gamma * f(alpha * x + s) + beta on one [BLOCK_M, BLOCK_N] tile; fp32 math."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < D
    mask = (rows < M)[:, None] & col_mask[None, :]
    x = tl.load(X + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
    u = tl.load(ALPHA).to(tl.float32) * x.to(tl.float32)
    if HAS_S:
        if S_PER_CHANNEL:
            u = u + tl.load(S + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
        else:
            u = u + tl.load(S).to(tl.float32)
    y = _f(u)
    if HAS_AFFINE:
        gamma = tl.load(GAMMA + cols, mask=col_mask, other=0.0).to(tl.float32)
        beta = tl.load(BETA + cols, mask=col_mask, other=0.0).to(tl.float32)
        y = y * gamma[None, :] + beta[None, :]
    tl.store(Y + rows[:, None] * stride_ym + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
'''

BWD_KERNEL = '''
@triton.jit
def _bwd_kernel(
    X, DY, DX, ALPHA, S, GAMMA,
    P_DALPHA, P_DS, P_DGAMMA, P_DBETA,
    M, D, stride_xm, stride_dym, stride_dxm, rows_per_program,
    HAS_S: tl.constexpr, S_PER_CHANNEL: tl.constexpr, HAS_AFFINE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """dx, and per-program column partials of d_alpha, d_s, d_gamma, d_beta (fp32)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < D
    alpha = tl.load(ALPHA).to(tl.float32)
    shift = tl.zeros([BLOCK_N], dtype=tl.float32)
    if HAS_S:
        if S_PER_CHANNEL:
            shift = shift + tl.load(S + cols, mask=col_mask, other=0.0).to(tl.float32)
        else:
            shift = shift + tl.load(S).to(tl.float32)
    gamma = tl.full([BLOCK_N], 1.0, tl.float32)
    if HAS_AFFINE:
        gamma = tl.load(GAMMA + cols, mask=col_mask, other=0.0).to(tl.float32)
    acc_dalpha = tl.zeros([BLOCK_N], dtype=tl.float32)
    acc_ds = tl.zeros([BLOCK_N], dtype=tl.float32)
    acc_dgamma = tl.zeros([BLOCK_N], dtype=tl.float32)
    acc_dbeta = tl.zeros([BLOCK_N], dtype=tl.float32)
    row_start = pid_m * rows_per_program
    for r in range(0, rows_per_program, BLOCK_M):
        rows = (row_start + r + tl.arange(0, BLOCK_M)).to(tl.int64)
        mask = (rows < M)[:, None] & col_mask[None, :]
        x = tl.load(X + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
        dy = tl.load(DY + rows[:, None] * stride_dym + cols[None, :], mask=mask, other=0.0)
        x = x.to(tl.float32)
        dy = dy.to(tl.float32)
        u = alpha * x + shift[None, :]
        fu, dfu = _f_df(u)
        g = tl.where(mask, dy * gamma[None, :] * dfu, 0.0)  # dL/du
        tl.store(DX + rows[:, None] * stride_dxm + cols[None, :],
                 (g * alpha).to(DX.dtype.element_ty), mask=mask)
        acc_dalpha += tl.sum(g * x, axis=0)
        acc_ds += tl.sum(g, axis=0)
        acc_dgamma += tl.sum(tl.where(mask, dy * fu, 0.0), axis=0)
        acc_dbeta += tl.sum(dy, axis=0)
    out = pid_m.to(tl.int64) * D + cols
    tl.store(P_DALPHA + out, acc_dalpha, mask=col_mask)
    tl.store(P_DS + out, acc_ds, mask=col_mask)
    tl.store(P_DGAMMA + out, acc_dgamma, mask=col_mask)
    tl.store(P_DBETA + out, acc_dbeta, mask=col_mask)
'''


def triton_source(
    expr: sympy.Expr, derivative: sympy.Expr, variable: sympy.Symbol, canonical: str
) -> str:
    """Triton module: helpers, ``_f``, ``_f_df`` and the two kernels."""
    printer = TritonPrinter(variable)
    jit = "@triton.jit\n"
    const = "tl.zeros_like(u) + {value}"
    fn = _function(printer, "_f", {"f": expr}, variable, jit, const)
    both = _function(printer, "_f_df", {"f": expr, "df": derivative}, variable, jit, const)
    return (
        _header("Triton kernels", canonical, expr, derivative)
        + "\nimport triton\nimport triton.language as tl\n\n"
        + printer.helper_source()
        + "\n\n"
        + fn
        + "\n\n"
        + both
        + "\n"
        + FWD_KERNEL
        + "\n"
        + BWD_KERNEL
    )


C_PRELUDE = """
#include <math.h>
#include <stdint.h>
#include <string.h>
"""

C_KERNELS = """
/* y = gamma * f(alpha * x + s) + beta over rows [r0, r1) of a contiguous [M, D] fp32 array */
void nf_forward(const float* restrict x, float* restrict y, int64_t r0, int64_t r1, int64_t D,
                float alpha, const float* restrict s, const float* restrict gamma,
                const float* restrict beta) {
    for (int64_t r = r0; r < r1; ++r) {
        const float* restrict xr = x + r * D;
        float* restrict yr = y + r * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) {
            float u = alpha * xr[d] + s[d];
            yr[d] = gamma[d] * nf_f(u) + beta[d];
        }
    }
}

/* dx over rows [r0, r1), and this range's partial sums: per channel d_s, d_gamma, d_beta
   (added into p_ds, p_dgamma, p_dbeta) and d_alpha (added into *p_dalpha, in double). */
void nf_backward(const float* restrict dy, const float* restrict x, float* restrict dx,
                 int64_t r0, int64_t r1, int64_t D, float alpha, const float* restrict s,
                 const float* restrict gamma, float* restrict p_ds, float* restrict p_dgamma,
                 float* restrict p_dbeta, double* restrict p_dalpha) {
    double dalpha = 0.0;
    for (int64_t r = r0; r < r1; ++r) {
        const float* restrict xr = x + r * D;
        const float* restrict dyr = dy + r * D;
        float* restrict dxr = dx + r * D;
        float row = 0.0f;
#pragma omp simd reduction(+:row)
        for (int64_t d = 0; d < D; ++d) {
            float xv = xr[d];
            float u = alpha * xv + s[d];
            float fu, dfu;
            nf_f_df(u, &fu, &dfu);
            float g = dyr[d];
            float t = g * gamma[d] * dfu; /* dL/du */
            dxr[d] = t * alpha;
            row += t * xv;
            p_ds[d] += t;
            p_dgamma[d] += g * fu;
            p_dbeta[d] += g;
        }
        dalpha += (double)row;
    }
    *p_dalpha += dalpha;
}
"""


def _c_function(printer: CPrinter, outputs: dict[str, sympy.Expr]) -> str:
    lines, printed = cse_lines(printer, outputs, "    const float ", "    const int ")
    lines = [line + ";" for line in lines]
    if len(outputs) == 1:
        body = "\n".join([*lines, f"    return {printed['f']};"])
        return f"static inline float nf_f(float u) {{\n{body}\n}}\n"
    body = "\n".join([*lines, f"    *f_out = {printed['f']};", f"    *df_out = {printed['df']};"])
    return (
        "static inline void nf_f_df(float u, float* restrict f_out, float* restrict df_out) {\n"
        f"{body}\n}}\n"
    )


def c_source(expr: sympy.Expr, derivative: sympy.Expr, variable: sympy.Symbol, canonical: str):
    """C99 source of the native CPU kernels (``nf_forward``, ``nf_backward``)."""
    printer = CPrinter(variable)
    header = _header("C kernels", canonical, expr, derivative)
    comment = "/* " + header.strip().strip('"').replace("*/", "* /") + " */\n"
    f = _c_function(printer, {"f": expr})
    both = _c_function(printer, {"f": expr, "df": derivative})
    return comment + C_PRELUDE + printer.helper_source() + "\n" + f + "\n" + both + C_KERNELS
