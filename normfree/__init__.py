"""normfree: a service for studying normalization-free transformers.

The package reads bottom-up along the path of one formula:

    search_space  (expression -> Candidate)
    kernels       (Candidate -> compiled operator, create_norm)
    workers       (operator -> proxy model -> trial -> study)
    storage       (candidates, studies, trials, curves, diagnostics in SQL)
    api / cli     (REST, dashboard, command line)

A lower layer never imports a higher one.
"""

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from normfree.client import Client
    from normfree.workers.record import record_trial

# Top-level names, imported on first use: ``import normfree`` stays light (the CLI's --help
# loads neither httpx nor the engine).
_LAZY = {"Client": "normfree.client", "record_trial": "normfree.workers.record"}


def __getattr__(name: str) -> Any:
    """``normfree.Client`` and ``normfree.record_trial``, imported when first asked for."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'normfree' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = ["Client", "__version__", "record_trial"]
