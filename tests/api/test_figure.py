"""The pages' figures are plain dicts (``normfree.api.figure``): plotly's own graph objects must
accept every one of them, property for property, so that a chart that the browser draws is a
chart plotly documents. Each builder runs on data that reaches its every branch (baselines,
diverged cells, a secondary axis, two panels) and ``go.Figure`` validates the result."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import pytest

from normfree.api import comparison_plots, figure, plots

CURVES = [
    {"epoch": e, "train_loss": 1.0 / (e + 1), "val_loss": 1.1 / (e + 1), "metrics": {"acc": 0.5}}
    for e in range(3)
]
DIAGNOSTICS = [
    {"layer": layer, "epoch": e, "alpha": 0.5 + e / 10, "input_std": 1.0 + e, "gamma_mean": 1.0,
     "gamma_std": 0.1, "branch_norm": 0.3}
    for layer in ("blocks.0.norm1", "norm_final") for e in range(2)
]  # fmt: skip
CELLS = [
    {"function": "erf", "value": v, "mean": 0.9 - v / 10, "ci_low": 0.8 - v / 10,
     "ci_high": 0.95 - v / 10, "n": 3, "n_diverged": int(v == 2), "label": f"erf@{v}"}
    for v in (0, 1, 2)
] + [{"function": "tanh", "value": 2, "mean": None, "n": 0, "n_diverged": 3}]  # fmt: skip
TRIALS = [
    {"id": 1, "seed": 0, "order": 1, "arm": "a", "status": "COMPLETE", "value": 0.5,
     "best_so_far": 0.5, "epochs_run": 3, "curves": CURVES},
    {"id": 2, "seed": 1, "order": 2, "arm": "b", "status": "PRUNED", "value": None,
     "last_value": 0.3, "best_so_far": 0.5, "epochs_run": 1, "pruned_at": 1, "curves": CURVES[:1]},
]  # fmt: skip
SETTING = {
    "setting": "ViT-B top-1", "direction": "maximize", "proxy_metric": "accuracy",
    "metric": "top-1", "spearman": 0.5,
    "cells": [
        {"cell": "erf", "reference": {"value": 82.0, "failed": False, "high": 82.5},
         "proxy": {"mean": 0.9, "failed": False, "ci_high": 0.92}},
        {"cell": "identity", "reference": {"value": None, "failed": True},
         "proxy": {"mean": None, "failed": True}},
    ],
}  # fmt: skip
ROWS = [
    {"candidate": "erf", "mean": 0.9, "ci_low": 0.88, "ci_high": 0.92, "n": 3, "is_best": True},
    {"candidate": "tanh", "mean": 0.89, "ci_low": 0.86, "ci_high": 0.91, "n": 3,
     "indistinguishable": True},
]  # fmt: skip

BUILDERS: dict[str, Any] = {
    "function": lambda: plots.function_figure([-1, 0, 1], [-0.8, 0, 0.8], [0.4, 1, 0.4], "erf"),
    "leaderboard": lambda: plots.leaderboard_figure(ROWS, "accuracy"),
    "study": lambda: plots.study_figure(
        CELLS, "accuracy", "shift_h", [{"function": "layernorm", "mean": 0.85}]
    ),
    "options": lambda: plots.options_figure(CELLS, "accuracy"),
    "curves": lambda: plots.curves_figure(CURVES),
    "alpha": lambda: plots.alpha_figure(DIAGNOSTICS),
    "layers": lambda: plots.layers_figure(DIAGNOSTICS),
    "importance": lambda: plots.importance_figure(
        {"features": [{"name": "bounded", "rho": 0.4, "ci_low": 0.1, "ci_high": 0.6}]}
    ),
    "fidelity": lambda: plots.fidelity_figure(SETTING),
    "compare_trials": lambda: comparison_plots.compare_figure(
        {"metric": "val_loss", "trials": TRIALS}
    ),
    "compare_arms": lambda: comparison_plots.compare_figure(
        {
            "metric": "acc",
            "mode": "arms",
            "trials": TRIALS,
            "arms": [{"label": "a", "trial_ids": [1]}],
        }
    ),
    "history": lambda: comparison_plots.history_figure({"objective": "acc", "trials": TRIALS}),
    "pruning": lambda: comparison_plots.pruning_figure(TRIALS),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_figure_is_one_plotly_accepts(name: str) -> None:
    data = plots.plain_figure(BUILDERS[name]())
    assert data["data"], "a figure with no trace"
    go.Figure(data)  # raises ValueError on any property plotly does not know or accept
    theme = data["layout"].get("template")  # by name in a builder: resolved for plotly.js
    assert isinstance(theme, dict) and "layout" in theme, theme
    html = plots.to_div(BUILDERS[name](), "f")
    assert 'id="f"' in html and "Plotly.newPlot" in html


def test_magic_underscores_and_titles_nest_as_plotly_does() -> None:
    fig = figure.Figure(figure.scatter(x=[1], y=[2], marker_color="red", line_dash="dot"))
    fig.update_layout(title="t", xaxis_title="x", yaxis={"title": "y", "range": [0, 1]})
    fig.update_layout(yaxis_title_font_size=9, margin={"l": 1})
    fig.update_layout(margin={"r": 2})  # merged, not replaced
    trace, layout = fig.to_plotly_json()["data"][0], fig.to_plotly_json()["layout"]
    assert trace["marker"] == {"color": "red"} and trace["line"] == {"dash": "dot"}
    assert trace.type == "scatter" and trace.marker == {"color": "red"}  # attribute reads
    assert layout["title"] == {"text": "t"} and layout["xaxis"] == {"title": {"text": "x"}}
    assert layout["yaxis"] == {"title": {"text": "y", "font": {"size": 9}}, "range": [0, 1]}
    assert layout["margin"] == {"l": 1, "r": 2}
    expected = go.Figure(go.Scatter(x=[1], y=[2], marker_color="red", line_dash="dot"))
    expected.update_layout(title="t", xaxis_title="x", yaxis={"title": "y", "range": [0, 1]})
    expected.update_layout(yaxis_title_font_size=9, margin={"l": 1})
    expected.update_layout(margin={"r": 2})
    want = expected.to_plotly_json()
    want["layout"].pop("template")  # plotly's default theme, which a plain figure leaves out
    assert want["layout"] == layout and want["data"][0] == dict(trace)


def test_rules_and_a_secondary_axis_match_plotly() -> None:
    fig = figure.Figure()
    fig.add_trace(figure.scatter(x=[0, 1], y=[0, 1]))
    fig.add_trace(figure.scatter(x=[0, 1], y=[5, 6]), secondary_y=True)
    fig.add_hline(y=0.5, line_dash="dot", annotation_text="LN", annotation_position="top left")
    fig.add_vline(x=0, line_width=1)
    data = fig.to_plotly_json()
    assert data["data"][1]["yaxis"] == "y2"
    assert data["layout"]["yaxis2"] == {"overlaying": "y", "side": "right"}
    hline, vline = data["layout"]["shapes"]
    assert (hline["y0"], hline["y1"], hline["xref"], hline["line"]) == (
        0.5, 0.5, "x domain", {"dash": "dot"}
    )  # fmt: skip
    assert (vline["x0"], vline["yref"], vline["y0"], vline["y1"]) == (0, "y domain", 0, 1)
    (label,) = data["layout"]["annotations"]
    assert (label["text"], label["y"], label["xanchor"], label["yanchor"]) == (
        "LN", 0.5, "left", "bottom"
    )  # fmt: skip
    go.Figure(data)
    with pytest.raises(TypeError, match="unsupported keyword"):
        fig.add_hline(y=1, colour="red")
