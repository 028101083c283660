"""normfree: a service for studying normalization-free transformers.

The package reads bottom-up along the path of one formula:

    search_space  (expression -> Candidate)
    kernels       (Candidate -> compiled operator, create_norm)
    workers       (operator -> proxy model -> trial -> study)
    storage       (candidates, studies, trials, curves, diagnostics in SQL)
    api / cli     (REST, dashboard, command line)

A lower layer never imports a higher one.
"""

__version__ = "0.1.0"
