"""The kernel cache: real files, reused in-process and across processes, safe under concurrency."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from normfree.kernels import _cache, compile_candidate
from normfree.kernels._codegen import generator_sources, imported_modules
from normfree.search_space import catalog
from tests.extend.scratch import edit, run, scratch_copy

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


def test_the_key_covers_every_source_of_a_kernel() -> None:
    """The printers, the templates, the primitives table with its helpers and fits, and what
    the table imports: every normfree module the generator's code reaches."""
    package = Path(_cache.__file__).parents[1]
    names = {p.relative_to(package).as_posix() for p in generator_sources()}
    assert {"kernels/_codegen.py", "kernels/_printers.py", "search_space/primitives.py",
            "search_space/_fits.py"} <= names  # fmt: skip
    assert "kernels/_cache.py" not in names and "kernels/_ops.py" not in names  # not generators


def test_the_key_follows_relative_imports_too() -> None:
    tree = ast.parse("from . import _x\nfrom ..search_space.y import z\nimport normfree.a")
    names = set(imported_modules(tree, "normfree.kernels"))
    assert {"normfree.kernels._x", "normfree.search_space.y", "normfree.search_space.y.z",
            "normfree.a"} <= names  # fmt: skip


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


STALE_CHILD = """
import json, pathlib, sys
from normfree.kernels import KernelOptions, compile_candidate
from normfree.search_space import parse
options = KernelOptions(cache=pathlib.Path(sys.argv[1]))
op = compile_candidate(parse("erfc(-u) - 1"), options)
print(json.dumps([op.torch_module.__file__, str(op.native_kernels.path)]))
"""


def test_a_changed_primitive_row_is_a_cache_miss(tmp_path: Path) -> None:
    """Edit one row of the primitives table (erfc's torch column becomes a helper) in a scratch
    copy: with the same warm cache, the next process generates new files instead of loading
    the old ones, and the new code is the edited row's."""
    cache = tmp_path / "cache"
    root = scratch_copy(tmp_path / "checkout")

    def files() -> list[str]:
        proc = run(root, ["-c", STALE_CHILD, str(cache)], timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    before = files()
    helper = 'Code("_erfc", "def _erfc(x):\\n    return 1.0 - torch.erf(x)\\n")'
    edit(root, "normfree/search_space/primitives.py",
         lambda text: text.replace('torch="torch.erfc"', f"torch={helper}"))  # fmt: skip
    after = files()
    assert all(a != b for a, b in zip(after, before, strict=True))  # new keys: torch and C
    assert "def _erfc(x):" in Path(after[0]).read_text()
    assert "torch.erfc" in Path(before[0]).read_text()  # the old file is left to old code
