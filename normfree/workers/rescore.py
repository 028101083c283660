"""The same runs ranked by another objective: a ``heldout_*`` preset from its source's results.

``vit-screen-heldout`` trains exactly as ``vit-screen`` and differs only in the number a trial
is ranked by (``trainer.pooled_heldout``: the validation and test splits pooled), which is a
function of the final metrics every vit-screen trial already stores. So the benchmarks that
calibrate the default screen rescore vit-screen's recorded runs instead of training them again
(bench/calibration.py and bench/discriminative.py, ``--rescore-from``); a test checks the
identity on a tiny preset (tests/workers/test_trainer.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any


def check_rescorable(source: str, proxy: str) -> tuple[int, int]:
    """(validation, test) split sizes of ``proxy``; refuses a pair that trains differently."""
    from normfree.workers.data import load_builtin
    from normfree.workers.proxies import PROXIES

    src, dst = PROXIES[source], PROXIES[proxy]
    same = replace(
        src,
        name=dst.name,
        objective=dst.objective,
        direction=dst.direction,  # how a score is read, not how the run trains
        description=dst.description,
        calibration=dst.calibration,  # the record of its own fidelity check, not its training
        epoch_cost=dst.epoch_cost,  # a measurement of its speed, not how it trains
    )
    if same != dst or not dst.objective.startswith("heldout_"):
        raise ValueError(f"{proxy} does not train exactly as {source}: its runs cannot be rescored")
    sizes = load_builtin(dst.dataset).sizes()
    cap = dst.max_eval
    return (min(sizes["val"], cap or sizes["val"]), min(sizes["test"], cap or sizes["test"]))


def rescored_metrics(metrics: dict[str, Any], sizes: tuple[int, int]) -> dict[str, Any]:
    """``metrics`` plus the pooled held-out ones (unchanged when the run left no test metrics:
    a diverged trial)."""
    from normfree.workers.trainer import pooled_heldout

    m = dict(metrics or {})
    if all(k in m for k in ("val_loss", "val_acc", "test_loss", "test_acc")):
        n_val, n_test = sizes
        m.update(
            pooled_heldout(
                (m["val_loss"], m["val_acc"], n_val), (m["test_loss"], m["test_acc"], n_test)
            )
        )
    return m
