"""The calibration facts: rules on hand-made results, and a smoke run on a tiny preset."""

from __future__ import annotations

import pytest

from normfree.fidelity.facts import FACTS, cells_for, evaluate, evaluate_all, facts_for
from normfree.fidelity.reference import cell_key, norm_cell_key
from normfree.fidelity.report import ProxyTrial


def _trials(cell, values, direction="maximize") -> list[ProxyTrial]:
    key = cell_key(cell)
    return [
        ProxyTrial(key, cell.label, i, failed=v is None, objective=v, objective_direction=direction)
        for i, v in enumerate(values)
    ]


def _fact(claim_start: str):
    return next(f for f in FACTS if f.claim.startswith(claim_start))


def test_not_worse_within_one_pooled_std() -> None:
    f = _fact("Derf at least")
    ln = _trials(f.versus, [0.90, 0.92, 0.91])  # std 0.01
    ok = evaluate(f, ln + _trials(f.subject, [0.895, 0.915, 0.905]))  # 0.005 below, std 0.01
    assert ok["passed"] is True and ok["seed_std"] == pytest.approx(0.01)
    assert ok["difference_in_stds"] == pytest.approx(-0.5)
    bad = evaluate(f, ln + _trials(f.subject, [0.88, 0.90, 0.89]))  # 2 stds below
    assert bad["passed"] is False
    failed = evaluate(f, ln + _trials(f.subject, [None, None, 0.95]))
    assert failed["passed"] is False and failed["subject"]["failed"]


def test_worse_or_failed_and_worse() -> None:
    f = _fact("no norm (identity) at least 3")
    ln = _trials(f.versus, [0.90, 0.92, 0.91])
    assert evaluate(f, ln + _trials(f.subject, [None, None, None]))["passed"] is True
    assert evaluate(f, ln + _trials(f.subject, [0.86, 0.88, 0.87]))["passed"] is True  # -4 std
    assert evaluate(f, ln + _trials(f.subject, [0.89, 0.91, 0.90]))["passed"] is False  # -1 std
    g = _fact("tanh with alpha fixed")
    dyt = _trials(g.versus, [0.80, 0.82])
    assert evaluate(g, dyt + _trials(g.subject, [0.70, 0.72]))["passed"] is True
    assert evaluate(g, dyt + _trials(g.subject, [0.85, 0.83]))["passed"] is False


def test_within_and_minimised_objectives() -> None:
    f = _fact("RMSNorm within")
    ln = _trials(f.versus, [0.90, 0.92, 0.91])
    assert evaluate(f, ln + _trials(f.subject, [0.91, 0.92, 0.915]))["passed"] is True
    assert evaluate(f, ln + _trials(f.subject, [0.95, 0.97, 0.96]))["passed"] is False
    d = next(x for x in facts_for("dit") if x.metric == "objective" and x.rule == "not_worse")
    ln_loss = _trials(d.versus, [0.120, 0.122, 0.121], "minimize")
    # a lower loss is better: Derf at 0.118 passes, at 0.125 (4 stds worse) fails
    assert evaluate(d, ln_loss + _trials(d.subject, [0.117, 0.119, 0.118], "minimize"))["passed"]
    worse = evaluate(d, ln_loss + _trials(d.subject, [0.124, 0.126, 0.125], "minimize"))
    assert worse["passed"] is False and worse["difference"] == pytest.approx(-0.004)


def test_missing_cells_and_unmeasured_fd_are_not_measured() -> None:
    f = _fact("Derf at least")
    assert evaluate(f, _trials(f.versus, [0.9, 0.91]))["passed"] is None
    fd = next(x for x in facts_for("dit") if x.metric == "fd")
    both = _trials(fd.versus, [0.1, 0.11], "minimize") + _trials(fd.subject, [0.1, 0.1], "minimize")
    assert evaluate(fd, both)["passed"] is None  # no trial measured FD


def test_every_fact_cell_maps_to_a_trainable_norm() -> None:
    from normfree.specs import NormSpec

    for family in ("vit", "dit"):
        for cell in cells_for(family):
            spec = NormSpec(**cell.norm_fields())
            assert norm_cell_key(spec.model_dump()) == cell_key(cell)


@pytest.mark.slow
def test_calibration_smoke_on_a_tiny_preset() -> None:
    """Train every ViT fact cell on vit-tiny for two seeds and evaluate the facts: each fact is
    measured, and its verdict follows from the numbers it reports (not a calibrated screen)."""
    from normfree.specs import NormSpec, TrialConfig
    from normfree.workers.trainer import train_trial

    trials = []
    for cell in cells_for("vit"):
        norm = NormSpec(**cell.norm_fields())
        for seed in (0, 1):
            r = train_trial(TrialConfig(proxy="vit-tiny", norm=norm, seed=seed))
            assert r.status in ("complete", "diverged"), r.error
            trials.append(
                ProxyTrial(
                    norm_cell_key(norm.model_dump()),
                    cell.label,
                    seed,
                    failed=r.status == "diverged",
                    objective=r.value if r.status == "complete" else None,
                    objective_direction=r.direction,
                )
            )
    rows = evaluate_all("vit", trials)
    assert len(rows) == 5 and all(r["passed"] is not None for r in rows)
    for r in rows:
        if r["rule"] == "not_worse" and not r["subject"]["failed"]:
            assert r["passed"] == (r["difference"] >= -r["sigmas"] * r["seed_std"])
