"""The per-node kernel cache is safe to share between the workers of one node.

docker-compose mounts one named volume per node at the parent of ``NORMFREE_KERNEL_CACHE``, and
every Ray worker process of that node generates kernels into it. This test starts several
independent processes at the same instant on one fresh cache directory (set only through
``NORMFREE_KERNEL_CACHE``, as the containers do) and checks the guarantee the deployment relies
on: each candidate's generated files are written once (every process imports the very same
file: same inode, never replaced under a reader), nothing half-written or temporary is left,
and every process gets a working operator.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)

_WORKER = r"""
import json, os, sys, time
from pathlib import Path
go = Path(sys.argv[1])
import torch
from normfree.kernels import KernelOptions, compile_candidate, create_norm
from normfree.search_space import catalog
from normfree.settings import get_settings
options = KernelOptions.from_settings(get_settings())  # as a worker's entry hands them down
candidate = catalog.resolve("shift_h(erf, 0.3)")
while not go.exists():          # everyone imported: start together
    time.sleep(0.005)
norm = create_norm(candidate, 8, kernels=options)
x = torch.randn(4, 8, requires_grad=True)
norm(x).sum().backward()
assert torch.isfinite(x.grad).all()
op = compile_candidate(candidate, options)
files = {}
for kind in ("torch", "triton"):
    module = getattr(op, f"{kind}_module")
    files[kind] = [module.__file__, os.stat(module.__file__).st_ino]
print(json.dumps({"files": files, "cache": str(op.options.cache)}))
"""


def test_concurrent_workers_share_one_generated_kernel(tmp_path: Path) -> None:
    cache = tmp_path / "node-cache" / "kernels"
    go = tmp_path / "go"
    env = {**os.environ, "NORMFREE_KERNEL_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    env.pop("TRITON_INTERPRET", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(go)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(3)
    ]
    try:
        time.sleep(0.5)
        go.touch()
        outs = [p.communicate(timeout=150) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    reports = []
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err.decode()[-3000:]
        reports.append(json.loads(out.decode().strip().splitlines()[-1]))
    assert {r["cache"] for r in reports} == {str(cache)}  # the setting, not a default
    for kind in ("torch", "triton"):
        seen = {tuple(r["files"][kind]) for r in reports}
        assert len(seen) == 1, f"{kind}: processes imported different files {seen}"
        (path, _inode), *_ = seen
        assert Path(path).parent == cache
    generated = sorted(p.name for p in cache.glob("*.py"))
    assert len(generated) == 2, generated  # one torch and one Triton source for the candidate
    assert not [p for p in cache.iterdir() if p.suffix == ".tmp"]
