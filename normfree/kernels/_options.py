"""``KernelOptions``: where generated kernels live and how CPU tensors run them.

The kernels read no settings: whoever reads them (a worker's entry, the CLI, a benchmark) builds
a ``KernelOptions`` with :meth:`KernelOptions.from_settings` and hands it down (``train_trial``,
``create_norm``, ``PointwiseNorm``, ``pointwise_norm``), so a trial computes the same thing
whatever the environment of the process it runs in. Code that passes nothing gets the process
default: the settings' defaults until :func:`set_default_options` (a test session's private
cache, a notebook) replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from normfree.settings import Settings

CpuBackend = Literal["native", "torch", "compile"]
_FIELDS = Settings.model_fields  # the defaults are the settings' own, stated once there


@dataclass(frozen=True)
class KernelOptions:
    """``cache``: the folder of generated sources and built libraries; ``cpu_backend``: what
    ``backend="auto"`` runs on CPU tensors; ``cc``: the native path's C compiler.

    Why "native" by default (bench/bench_kernels_cpu.py; figures in bench/results): the
    generated C is the fastest CPU path at every shape measured, from the ViT proxy's to
    [8192, 384], and compiles once per candidate and machine, then loads from the cache.
    ``torch.compile`` of the generated torch code is slower per step at these shapes and
    compiles again in every process; eager torch code is slower still. "torch" stays for
    machines without a C compiler (the native path falls back to it by itself) and "compile"
    for comparison.
    """

    cache: Path = _FIELDS["kernel_cache"].default
    cpu_backend: CpuBackend = _FIELDS["kernel_cpu_backend"].default
    cc: str = _FIELDS["kernel_cc"].default

    @classmethod
    def from_settings(cls, settings: Any) -> KernelOptions:
        """The options a ``normfree.settings.Settings`` describes."""
        return cls(Path(settings.kernel_cache), settings.kernel_cpu_backend, settings.kernel_cc)


_default = KernelOptions()


def default_options() -> KernelOptions:
    """What a call that passes no options uses."""
    return _default


def set_default_options(options: KernelOptions | None) -> None:
    """Replace the process default (None restores the settings' defaults)."""
    global _default
    _default = options if options is not None else KernelOptions()


__all__ = ["CpuBackend", "KernelOptions", "default_options", "set_default_options"]
