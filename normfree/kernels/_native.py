"""The native CPU path: generated C, built by the system C compiler, launched through ctypes.

Why a fourth printer: on CPU the operator is a streaming loop whose cost is the transcendental
per element. ATen (eager) makes a pass over memory per op and ``torch.compile`` cannot fuse the
row-wise reductions of the backward with its full-size stores (see :mod:`._torch_ops`), and
both call an accurate but slow vector erf. The C source from :func:`._codegen.c_source` is one
loop per direction (forward: read x, write y; backward: read x and dy, write dx, keep every
parameter gradient's partial sums in L1-resident per-channel buffers) with branch-free inline
exp/erf that gcc vectorises (see the C section of :mod:`._printers`).

Build: ``cc -O3 -fopenmp-simd -fno-math-errno -fno-trapping-math`` (AVX2+FMA when torch reports
the CPU capable of it), linked with glibc's libmvec for logf/sinf/cosf. The ``.c`` and ``.so``
files live in the kernel cache next to the Triton/torch modules, keyed by the expressions,
the generator version and the compiler flags, written atomically under a file lock: a candidate
is compiled once per machine (~0.3-1 s) and every later process just loads it.

Threads: rows are split into contiguous blocks, one per torch intra-op thread
(``torch.get_num_threads()``), each block run by a pool thread; ctypes releases the GIL during the
call, so blocks run in parallel. Each block has private partial buffers (deterministic for a fixed
thread count: partials are summed in block order, no atomics).

Scope: fp32 math. fp16/bf16 inputs are converted to fp32 on the way in and y/dx back (a copy
the fused kernels on GPU avoid; the CPU proxies train in fp32), fp64 inputs (gradcheck) take the
eager torch path, which computes in fp64. Without a working C compiler the first call warns once
and the operator falls back to the eager torch path: same results, slower.
"""

from __future__ import annotations

import ctypes
import hashlib
import platform
import shutil
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from torch import Tensor

from normfree.kernels._cache import _slug, create_once
from normfree.kernels._options import KernelOptions
from normfree.kernels._torch_ops import NormParams
from normfree.private import private_file

# Below this many elements a call runs on the calling thread: the pool hand-off (~20-50 us)
# costs more than the split saves (the default ViT proxy's norm calls are ~70k elements).
PARALLEL_MIN_ELEMENTS = 1 << 17

_P = ctypes.c_void_p
_I = ctypes.c_int64
_F = ctypes.c_float


class NativeBuildError(RuntimeError):
    """The C compiler is missing or rejected the generated source."""


def compiler(cc: str) -> str | None:
    """Path of the C compiler ``cc``, or None when it is not installed."""
    return shutil.which(cc)


def compile_flags() -> list[str]:
    """Flags for this machine: AVX2/FMA code only where torch detected the CPU supports it."""
    flags = ["-O3", "-std=gnu11", "-fPIC", "-shared", "-fopenmp-simd"]
    flags += ["-fno-math-errno", "-fno-trapping-math"]
    if platform.machine() in ("x86_64", "AMD64"):
        capability = torch.backends.cpu.get_cpu_capability()
        if capability in ("AVX2", "AVX512"):
            flags += ["-mavx2", "-mfma"]
    return flags


def link_flags() -> list[str]:
    return ["-lmvec", "-lm"] if platform.machine() in ("x86_64", "AMD64") else ["-lm"]


def build_key(source: str, cc: str) -> str:
    """Cache key of a built library: the source text and everything that shapes the binary."""
    parts = [source, cc, *compile_flags(), *link_flags()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


class NativeKernels:
    """A loaded ``.so`` of one candidate with typed entry points."""

    def __init__(self, path: Path) -> None:
        self.path = path
        lib = ctypes.CDLL(str(path))
        self.forward = lib.nf_forward
        self.forward.argtypes = [_P, _P, _I, _I, _I, _F, _P, _P, _P]
        self.forward.restype = None
        self.backward = lib.nf_backward
        self.backward.argtypes = [_P, _P, _P, _I, _I, _I, _F, _P, _P, _P, _P, _P, _P]
        self.backward.restype = None


_libraries: dict[Path, NativeKernels] = {}
_lock = threading.Lock()


def build(name: str, source: str, options: KernelOptions) -> NativeKernels:
    """Compile (once per machine) and load the library for ``source``."""
    cc = compiler(options.cc)
    if cc is None:
        raise NativeBuildError(f"no C compiler {options.cc!r} on PATH (set NORMFREE_KERNEL_CC)")
    key = build_key(source, options.cc)
    lib_path = options.cache / f"native_{_slug(name)}_{key}.so"
    with _lock:
        loaded = _libraries.get(lib_path)
        if loaded is not None:
            return loaded
        create_once(lib_path, lambda tmp: _compile(cc, source, lib_path.with_suffix(".c"), tmp))
        loaded = _libraries[lib_path] = NativeKernels(lib_path)
        return loaded


def _compile(cc: str, source: str, src_path: Path, out: Path) -> None:
    """Write ``source`` to ``src_path`` (kept for inspection) and compile it into ``out``."""
    private_file(src_path).write_text(source)
    cmd = [cc, *compile_flags(), str(src_path), "-o", str(out), *link_flags()]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NativeBuildError(f"{' '.join(cmd)}: {exc}") from exc
    if proc.returncode != 0:
        raise NativeBuildError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")


_pools: dict[int, ThreadPoolExecutor] = {}


def _blocks(m: int, d: int) -> list[tuple[int, int]]:
    """Row blocks, one per torch thread (a single block for small inputs)."""
    n = max(1, torch.get_num_threads())
    if n == 1 or m * d < PARALLEL_MIN_ELEMENTS or m < 2 * n:
        return [(0, m)]
    return [(i * m // n, (i + 1) * m // n) for i in range(n)]


def _run(blocks: list[tuple[int, int]], fn: Callable[[int, int, int], None]) -> None:
    if len(blocks) == 1:
        fn(0, *blocks[0])
        return
    with _lock:
        pool = _pools.get(len(blocks))
        if pool is None:
            pool = _pools[len(blocks)] = ThreadPoolExecutor(len(blocks), "normfree-native")
    for future in [pool.submit(fn, i, r0, r1) for i, (r0, r1) in enumerate(blocks)]:
        future.result()


def _channel(t: Tensor | None, d: int, fill: float) -> Tensor:
    """A contiguous fp32 ``[D]`` array for s / gamma / beta (scalars and absentees expanded)."""
    if t is None:
        return torch.full((d,), fill, dtype=torch.float32)
    return t.detach().to(torch.float32).expand(d).contiguous()


def _rows(t: Tensor) -> Tensor:
    """A contiguous fp32 ``[M, D]`` view (a copy only when dtype or layout require one)."""
    return t.detach().to(torch.float32).reshape(-1, t.shape[-1]).contiguous()


def forward(lib: NativeKernels, x: Tensor, p: NormParams) -> Tensor:
    """y = gamma * f(alpha * x + s) + beta, in x's dtype and shape."""
    alpha, s, gamma, beta = p
    d = x.shape[-1]
    x2 = _rows(x)
    m = x2.shape[0]
    y = torch.empty_like(x2)
    s_, g_, b_ = _channel(s, d, 0.0), _channel(gamma, d, 1.0), _channel(beta, d, 0.0)
    a = float(alpha)
    xp, yp, sp, gp, bp = x2.data_ptr(), y.data_ptr(), s_.data_ptr(), g_.data_ptr(), b_.data_ptr()

    def call(_: int, r0: int, r1: int) -> None:
        lib.forward(xp, yp, r0, r1, d, a, sp, gp, bp)

    if m:
        _run(_blocks(m, d), call)
    return y.view(x.shape).to(x.dtype)


def backward(
    lib: NativeKernels, dy: Tensor, x: Tensor, p: NormParams
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None, Tensor]:
    """(dx, d_alpha, d_s, d_gamma, d_beta) in fp32 (dx in x's dtype)."""
    alpha, s, gamma, _ = p
    d = x.shape[-1]
    x2, dy2 = _rows(x), _rows(dy)
    m = x2.shape[0]
    dx = torch.empty_like(x2)
    blocks = _blocks(m, d)
    partials = torch.zeros(len(blocks), 3, d, dtype=torch.float32)  # d_s, d_gamma, d_beta
    p_alpha = torch.zeros(len(blocks), dtype=torch.float64)
    s_, g_ = _channel(s, d, 0.0), _channel(gamma, d, 1.0)
    a = float(alpha)
    ptrs = (dy2.data_ptr(), x2.data_ptr(), dx.data_ptr())
    sp, gp = s_.data_ptr(), g_.data_ptr()
    row_bytes, block_bytes = d * 4, 3 * d * 4
    base, abase = partials.data_ptr(), p_alpha.data_ptr()

    def call(i: int, r0: int, r1: int) -> None:
        p = base + i * block_bytes
        grads = (p, p + row_bytes, p + 2 * row_bytes, abase + 8 * i)
        lib.backward(*ptrs, r0, r1, d, a, sp, gp, *grads)

    if m:
        _run(blocks, call)
    sums = partials.sum(0)
    d_s = None
    if s is not None:
        d_s = sums[0] if p.s_per_channel else sums[0].sum()
    d_gamma = sums[1] if gamma is not None else None
    d_alpha = p_alpha.sum().to(torch.float32)
    return dx.view(x.shape).to(x.dtype), d_alpha, d_s, d_gamma, sums[2]
