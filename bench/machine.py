"""The machine a benchmark ran on, recorded beside every speed figure.

Speed figures mean nothing without the CPU they came from: the project has been measured on an
AVX2-only Xeon without native bf16 and on an AMD EPYC with AVX-512 and AVX512-BF16, and the same
trial differs several-fold between them. Every benchmark that reports seconds records this.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


def describe() -> dict[str, Any]:
    """CPU model, core count, the vector flags that decide bf16/fp32 speed, the load and the
    Python version."""
    model, flags = platform.processor() or "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model in ("unknown", platform.processor()):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "flags": sorted(f for f in FLAGS if f in flags),
        "bf16_native": "avx512_bf16" in flags or "amx_bf16" in flags,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(describe()))
