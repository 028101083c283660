"""The fidelity statistics against a case computed by hand (ties, failures, a missing cell)."""

from __future__ import annotations

import math

import pytest

from normfree.fidelity.reference import build_set, norm_cell_key
from normfree.fidelity.report import ProxyTrial, build_report, fd_score, headline, setting_report

ROW = {"setting": "S", "family": "vit", "metric": "accuracy", "direction": "maximize"}


def _set(rows: list[dict]) -> object:
    return build_set({"name": "hand", "source": "by hand", "rows": rows})


def _row(function: str, value: float | None, **cell: object) -> dict:
    out = {**ROW, "resolution": 0.2, "cell": {"function": function, **cell}}
    if value is None:
        out["failed"] = True
    else:
        out["value_low"] = out["value_high"] = value
    return out


def _trials(norm: dict, label: str, outcomes: list[float | None]) -> list[ProxyTrial]:
    key = norm_cell_key(norm)
    return [
        ProxyTrial(key, label, seed, failed=v is None, objective=v)
        for seed, v in enumerate(outcomes)
    ]


@pytest.fixture(scope="module")
def case() -> dict:
    """Reference: A=LN 82.3, B=tanh 82.5, C=Derf 82.8, D=identity failed, E=linearclip 82.0,
    F=arctan 80.0 (no trials). Proxy: A .81, B .82, C .8333, D failed on 2 of 3 seeds, E .82
    (a proxy tie with B)."""
    ref = _set(
        [
            _row("layernorm", 82.3),
            _row("tanh", 82.5),
            _row("derf", 82.8),
            _row("identity", None),
            _row("linearclip", 82.0),
            _row("arctan", 80.0),
        ]
    )
    trials = (
        _trials({"name": "layernorm"}, "layernorm", [0.80, 0.82, 0.81])
        + _trials({"name": "shift_h(tanh, 0)"}, "shift_h(tanh, 0)", [0.81, 0.83, 0.82])
        + _trials({"name": "erf", "shift": "scalar"}, "erf + s", [0.83, 0.84, 0.83])
        + _trials({"name": "identity"}, "identity", [None, None, 0.5])
        + _trials({"name": "linearclip"}, "linearclip", [0.82, 0.82, 0.82])
    )
    return build_report(ref, trials, family="vit", n_boot=300)


def test_rank_correlations_match_the_hand_computation(case: dict) -> None:
    (s,) = case["settings"]
    # ranks: reference (A..E) 3,4,5,1,2; proxy 2,3.5,5,1,3.5 (B and E tie; D failed = lowest)
    assert s["spearman"] == pytest.approx(8 / math.sqrt(10 * 9.5))
    # tau-b: 8 concordant, 1 discordant (A-E), one pair tied on the proxy only (B-E)
    assert s["kendall"] == pytest.approx(7 / math.sqrt(10 * 9))
    assert s["n_cells"] == 5 and s["missing"] == ["arctan"]


def test_pairs_respect_the_resolution_ties_and_failures(case: dict) -> None:
    (s,) = case["settings"]
    # A-B differ by exactly the resolution (0.2): not a published order. 9 pairs remain.
    assert s["pairs_resolvable"] == 9 and s["pairs_agree"] == 7
    by = {(p["better"], p["worse"]): p for p in s["pairs"]}
    assert ("tanh", "layernorm") not in by and ("layernorm", "tanh") not in by
    assert by[("layernorm", "linearclip")]["agree"] is False  # proxy reverses it
    assert by[("tanh", "linearclip")]["agree"] is None  # a proxy tie agrees with nothing
    assert by[("derf", "identity")]["agree"] is True
    assert by[("derf", "identity")]["proxy_confident"] is True  # a failure vs a trained cell


def test_failure_agreement_uses_the_majority_of_seeds(case: dict) -> None:
    (s,) = case["settings"]
    assert s["failures"] == {
        "both_failed": 1,
        "reference_only": 0,
        "proxy_only": 0,
        "both_trained": 4,
        "agreement": 1.0,
    }
    ident = next(c for c in s["cells"] if c["cell"] == "identity")
    assert ident["proxy"]["failed"] and ident["proxy"]["n"] == 1 and ident["proxy"]["n_failed"] == 2


def test_bootstrap_interval_brackets_the_estimate_and_is_repeatable(case: dict) -> None:
    (s,) = case["settings"]
    lo, hi = s["spearman_ci"]
    assert lo is not None and lo <= s["spearman"] <= hi <= 1.0

    def noisy() -> dict:
        return build_report(
            _set([_row("layernorm", 82.3), _row("tanh", 82.5), _row("derf", 82.8)]),
            _trials({"name": "layernorm"}, "ln", [0.8, 0.9, 0.7])
            + _trials({"name": "tanh"}, "tanh", [0.85, 0.8, 0.75])
            + _trials({"name": "derf"}, "derf", [0.9, 0.95, 0.6]),
            family="vit",
            n_boot=200,
        )

    again, twice = noisy(), noisy()
    assert again["settings"][0]["spearman_ci"] == twice["settings"][0]["spearman_ci"]
    # noisy seeds: the interval is wide (resampling reorders the cells)
    lo2, hi2 = again["settings"][0]["spearman_ci"]
    assert hi2 - lo2 > 0.5


def test_summary_pools_settings_and_headline_says_it(case: dict) -> None:
    s = case["summary"]
    assert s["pairs_resolvable"] == 9 and s["pairs_agree"] == 7
    assert s["failure_agreement"] == 1.0 and s["cells"] == 5
    line = headline(case)
    assert "7/9 published orders reproduced" in line and "Spearman +0.82" in line


def test_other_family_and_uncovered_settings_are_not_compared() -> None:
    ref = _set(
        [
            {**_row("layernorm", 64.9), "setting": "D", "family": "dit", "metric": "fid",
             "direction": "minimize"},
            {**_row("erf", 63.2), "setting": "D", "family": "dit", "metric": "fid",
             "direction": "minimize"},
            _row("tanh", 80.0),
        ]
    )  # fmt: skip
    trials = _trials({"name": "layernorm"}, "ln", [0.9, 0.91])
    rep = build_report(ref, trials, family="dit", n_boot=0)
    (s,) = rep["settings"]
    # no FD measured: FID rows are compared with the objective (here maximised)
    assert s["proxy_metric"] == "objective" and s["n_cells"] == 1
    assert rep["not_compared"] == []
    assert build_report(ref, [], family="vit", n_boot=0)["not_compared"] == ["S"]


def test_train_loss_rows_read_the_eval_mode_train_loss() -> None:
    rows = [
        {**_row(f, v), "setting": "fit", "metric": "train_loss", "direction": "minimize",
         "resolution": 0.001}
        for f, v in (("layernorm", 0.2623), ("derf", 0.2681), ("tanh", 0.2714))
    ]  # fmt: skip
    ref = _set(rows)
    trials = []
    for name, shift, losses in (
        ("layernorm", "none", [0.50, 0.52]),
        ("erf", "scalar", [0.55, 0.56]),
        ("tanh", "none", [0.60, 0.58]),
    ):
        key = norm_cell_key({"name": name, "shift": shift})
        trials += [
            ProxyTrial(key, name, seed, failed=False, objective=0.5, eval_train_loss=v)
            for seed, v in enumerate(losses)
        ]
    s = setting_report(ref.rows, trials, n_boot=0)
    assert s["proxy_metric"] == "eval_train_loss"
    assert s["spearman"] == pytest.approx(1.0) and s["pairs_agree"] == 3


def test_fd_score_is_the_fd_metric_when_there_is_one() -> None:
    assert fd_score({"val_loss": 1.2, "fd_digits_clf": 3}) == 3.0
    assert fd_score({"val_loss": 1.2}) is None and fd_score(None) is None
