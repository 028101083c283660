"""GPU bandwidth of the generated Triton operator (Derf) in bf16, against torch.compile of the
reference and ATen's fused LayerNorm.

M = 16384 rows, D in {1024, 4096, 15360}. Bytes moved (parameters are negligible: D values):
forward reads x and writes y, 2 x 2 B x M x D; backward reads x and dy and writes dx,
3 x 2 B x M x D. Achieved GB/s = bytes / median time (``triton.testing.do_bench``), reported as a
fraction of the device's nominal peak (a table by device name) and of a measured device-to-device
copy (the practical ceiling). Goals (issue 3): forward >= 85% of peak, backward >= 75%, never
slower than torch.compile.

Without CUDA this prints one JSON object saying so and exits 0: on a machine with no GPU the
kernels are proven by the ahead-of-time sm_90 compile in tests/kernels/test_aot.py instead.
``--quick``: D = 1024 only. Results: bench/results/kernels_gpu.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from normfree.kernels.reference import reference_norm

ROOT = Path(__file__).resolve().parents[1]

# Nominal HBM bandwidth, bytes/s, by a substring of torch.cuda.get_device_name().
NOMINAL_PEAK = {"H200": 4.8e12, "H100 SXM": 3.35e12, "H100 PCIe": 2.0e12, "H100": 3.35e12,
                "A100-SXM4-80GB": 2.039e12, "A100": 1.555e12, "L40S": 0.864e12}  # fmt: skip
M = 16384
DIMS = [1024, 4096, 15360]


def nominal_peak(name: str) -> float | None:
    for key, value in NOMINAL_PEAK.items():
        if key in name:
            return value
    return None


def copy_bandwidth() -> float:
    import triton.testing

    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src))
    return 2 * src.numel() / (ms * 1e-3)


def bench_dim(d: int, peak: float | None, copy_bw: float) -> list[dict[str, object]]:
    import triton.testing

    from normfree.kernels import pointwise_norm
    from normfree.search_space import catalog

    erf = catalog.get("erf")
    x = torch.randn(M, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    params = [
        torch.tensor(0.5, device="cuda", requires_grad=True),
        torch.tensor(0.1, device="cuda", requires_grad=True),
        torch.ones(d, device="cuda", requires_grad=True),
        torch.zeros(d, device="cuda", requires_grad=True),
    ]
    ln_w = torch.ones(d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    ln_b = torch.zeros(d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    compiled_ref = torch.compile(lambda x, *p: reference_norm(x, torch.erf, *p))
    providers = {
        "generated-triton": lambda: pointwise_norm(x, erf, *params, backend="triton"),
        "torch.compile-reference": lambda: compiled_ref(x, *params),
        "layernorm-aten": lambda: torch.nn.functional.layer_norm(x, (d,), ln_w, ln_b),
    }
    rows = []
    for name, fwd in providers.items():
        y = fwd()
        leaves = [x, *(params if name != "layernorm-aten" else [ln_w, ln_b])]
        ms_fwd = triton.testing.do_bench(fwd)
        ms_bwd = triton.testing.do_bench(
            lambda y=y, leaves=leaves: torch.autograd.grad(y, leaves, dy, retain_graph=True)
        )
        for mode, ms, passes in (("fwd", ms_fwd, 2), ("bwd", ms_bwd, 3)):
            gbps = passes * 2 * M * d / (ms * 1e-3)
            rows.append({
                "kernel": "pointwise_norm[erf]", "provider": name, "mode": mode,
                "shape": [M, d], "dtype": "bf16", "device": torch.cuda.get_device_name(),
                "torch": torch.__version__, "ms": ms, "GBps": gbps / 1e9,
                "fraction_of_nominal_peak": gbps / peak if peak else None,
                "fraction_of_copy": gbps / copy_bw,
            })  # fmt: skip
    return rows


def _fraction(row: dict[str, object]) -> float:
    """Of the nominal peak when the device is in the table, else of the measured copy."""
    return float(row["fraction_of_nominal_peak"] or row["fraction_of_copy"])  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="D = 1024 only")
    args = parser.parse_args()
    from normfree.kernels import KernelOptions, set_default_options
    from normfree.settings import get_settings

    set_default_options(KernelOptions.from_settings(get_settings()))  # an entry: it reads them
    if not torch.cuda.is_available():
        print(json.dumps({"bench": "kernels_gpu", "skipped": True,
                          "reason": "no CUDA device here; the kernels are proven by the sm_90 "
                                    "AOT compile test (tests/kernels/test_aot.py)"}))  # fmt: skip
        return
    name = torch.cuda.get_device_name()
    peak = nominal_peak(name)
    copy_bw = copy_bandwidth()
    rows = []
    for d in [1024] if args.quick else DIMS:
        rows.extend(bench_dim(d, peak, copy_bw))
    out = (
        ROOT
        / "bench"
        / "results"
        / ("kernels_gpu_quick.json" if args.quick else "kernels_gpu.json")
    )
    out.write_text(json.dumps({"device": name, "nominal_peak_Bps": peak,
                               "copy_Bps": copy_bw, "rows": rows}, indent=1))  # fmt: skip
    ours = {(r["mode"], r["shape"][1]): r for r in rows if r["provider"] == "generated-triton"}
    comp = {
        (r["mode"], r["shape"][1]): r for r in rows if r["provider"] == "torch.compile-reference"
    }
    summary = {
        "bench": "kernels_gpu", "device": name,
        "fraction_of_peak": {f"{m}@{d}": round(_fraction(r), 3) for (m, d), r in ours.items()},
        "speedup_vs_torch_compile": {f"{m}@{d}": round(comp[(m, d)]["ms"] / r["ms"], 3)
                                     for (m, d), r in ours.items()},
        "results": str(out.relative_to(ROOT)),
    }  # fmt: skip
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
