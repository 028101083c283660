"""The kernel cache: real files, reused in-process and across processes, safe under concurrency."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from normfree.kernels import _cache, compile_candidate
from normfree.search_space import catalog

CHILD = """
import json, sys
from normfree.kernels import KernelOptions, compile_candidate
from normfree.search_space import catalog
from normfree.settings import get_settings
op = compile_candidate(catalog.get(sys.argv[1]), KernelOptions.from_settings(get_settings()))
print(json.dumps([op.torch_module.__file__, op.triton_module.__file__]))
"""


def _children(cache: Path, name: str, n: int) -> list[list[str]]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["NORMFREE_KERNEL_CACHE"] = str(cache)
    cmd = [sys.executable, "-c", CHILD, name]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    procs = [subprocess.Popen(cmd, env=env, **pipes) for _ in range(n)]
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr[-2000:]
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def test_second_compile_in_process_is_free(kernel_cache: Path) -> None:
    calls = []

    def source() -> str:
        calls.append(1)
        return "VALUE = 42\n"

    first = _cache.load_generated(kernel_cache, "torch", "probe", "k" * 20, source)
    second = _cache.load_generated(kernel_cache, "torch", "probe", "k" * 20, source)
    assert first is second and first.VALUE == 42 and len(calls) == 1
    assert Path(first.__file__).parent == kernel_cache
    op = compile_candidate(catalog.get("tanh"))
    assert compile_candidate(catalog.get("tanh")) is op
    assert op.torch_module is compile_candidate(catalog.get("tanh")).torch_module


def test_key_follows_the_exact_expressions() -> None:
    a = _cache.cache_key("triton", "erf(u)", "2*exp(-u**2)/sqrt(pi)")
    assert a == _cache.cache_key("triton", "erf(u)", "2*exp(-u**2)/sqrt(pi)")
    assert a != _cache.cache_key("triton", "erf(u)", "0")  # a changed derivative is a new kernel
    assert a != _cache.cache_key("torch", "erf(u)", "2*exp(-u**2)/sqrt(pi)")


def test_concurrent_processes_write_once_and_others_reuse(
    tmp_path: Path, kernel_cache: Path
) -> None:
    """Two children race on an empty directory; then this process reuses what they wrote."""
    cache = tmp_path / "shared"
    paths = _children(cache, "saturlog", 2)
    assert paths[0] == paths[1]
    files = sorted(f.name for f in cache.iterdir() if f.suffix == ".py")
    assert len(files) == 2 and files[0].startswith("torch_") and files[1].startswith("triton_")
    assert not [f for f in cache.iterdir() if f.suffix == ".tmp"]
    stamp = Path(paths[0][0]).stat().st_mtime_ns

    def regenerate() -> str:
        raise AssertionError("the file written by another process was not reused")

    op = compile_candidate(catalog.get("saturlog"))
    module = _cache.load_generated(cache, "torch", op.name, op._key("torch"), regenerate)
    assert module.__file__ == paths[0][0] and Path(paths[0][0]).stat().st_mtime_ns == stamp
