"""What reduced precision costs on this CPU: a stress-preset trial under bf16 autocast vs fp32.

The stress presets train under bf16 autocast (reduced precision, as large runs train). On a CPU
without native bf16 (AVX2 only, like the machine the project was first built on) every autocast
matmul converts and computes in emulation, and a bf16 trial ran ~5x slower than in fp32; on a
CPU with AVX512-BF16 it does not. The default screens train in fp32 so that their cost does not
depend on which of the two a user has. This measures the ratio in one run: the same preset,
function, seed and epoch, once per precision, one thread, CPU time (what an idle core would
spend); the result names the CPU and whether it has native bf16.

    python bench/bench_precision.py            # vit-stress, 1 epoch -> results/precision.json
    python bench/bench_precision.py --quick    # 512 training samples (< 30 s)

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse

import torch
from figures import save, timed_trial
from machine import describe


def run(proxy: str, precision: str, max_train: int | None) -> dict:
    from normfree.specs import TrialConfig
    from normfree.workers.trainer import parse_norm

    overrides: dict = {"precision": precision}
    if max_train:
        overrides["max_train"] = max_train
    cfg = TrialConfig(proxy=proxy, norm=parse_norm("derf"), epochs=1, overrides=overrides)
    _, cost = timed_trial(cfg)
    return {"precision": precision, **cost}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--proxy", default="vit-stress")
    args = ap.parse_args()
    max_train = 512 if args.quick else None
    run(args.proxy, "fp32", 128)  # warm-up: data generation and kernel builds out of the timing
    fp32 = run(args.proxy, "fp32", max_train)
    bf16 = run(args.proxy, "bf16", max_train)
    out = {
        "bench": "precision",
        "quick": args.quick,
        "proxy": args.proxy,
        "machine": describe(),
        "torch": torch.__version__,
        "runs": [fp32, bf16],
        # bf16 autocast's cost of the same trial (same samples), as a multiple of fp32's, in
        # CPU time: on a shared machine wall time also counts other processes' turns
        "bf16_over_fp32": bf16["cpu_s"] / max(fp32["cpu_s"], 1e-9),
    }
    save(out, "precision", args.quick)


if __name__ == "__main__":
    main()
