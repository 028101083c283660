"""A fidelity report compares each setting with the metric the screen ranks by, and shows the
others beside it (issue 25, point 4): FID settings against the DiT screen's loss, not its FD."""

from __future__ import annotations

import pytest

from normfree.fidelity.reference import build_set, norm_cell_key
from normfree.fidelity.report import ProxyTrial, setting_report


def _fid_set() -> object:
    rows = [
        {
            "setting": "FID",
            "family": "dit",
            "metric": "fid",
            "direction": "minimize",
            "resolution": 0.5,
            "cell": {"function": f},
            "value_low": v,
            "value_high": v,
        }
        for f, v in (("layernorm", 64.9), ("erf", 63.2), ("tanh", 70.2))
    ]
    return build_set({"name": "hand", "source": "by hand", "rows": rows})


def _trials(loss: dict[str, float], fd: dict[str, float]) -> list[ProxyTrial]:
    out = []
    for name in loss:
        for seed in range(3):
            out.append(
                ProxyTrial(
                    norm_cell_key({"name": name}),
                    name,
                    seed,
                    failed=False,
                    objective=loss[name] + 0.001 * seed,
                    objective_direction="minimize",
                    eval_train_loss=loss[name],
                    fd=fd[name] + seed,
                )
            )
    return out


def test_fid_settings_are_read_on_the_ranking_metric_with_fd_beside_it() -> None:
    # the loss orders the cells as published (erf < layernorm < tanh), the FD reverses them
    trials = _trials(
        {"erf": 0.30, "layernorm": 0.31, "tanh": 0.35},
        {"erf": 90.0, "layernorm": 80.0, "tanh": 70.0},
    )
    s = setting_report(_fid_set().rows, trials, n_boot=0)
    assert s["proxy_metric"] == "objective" and s["proxy_direction"] == "minimize"
    assert "ranking metric" in s["proxy_metric_reason"]
    assert s["spearman"] == pytest.approx(1.0)
    beside = {o["proxy_metric"]: o for o in s["others"]}
    assert set(beside) == {"fd", "eval_train_loss"}
    assert beside["fd"]["spearman"] == pytest.approx(-1.0)
    assert beside["fd"]["pairs_resolvable"] == s["pairs_resolvable"] == 3
    assert beside["fd"]["pairs_agree"] == 0


def test_a_metric_no_trial_measured_is_not_shown_beside() -> None:
    trials = [
        ProxyTrial(
            norm_cell_key({"name": n}),
            n,
            0,
            failed=False,
            objective=v,
            objective_direction="minimize",
        )
        for n, v in (("erf", 0.3), ("layernorm", 0.31), ("tanh", 0.35))
    ]
    s = setting_report(_fid_set().rows, trials, n_boot=0)
    assert s["proxy_metric"] == "objective" and s["others"] == []
