"""The figures of the comparison and search pages, from the answers of ``GET /api/compare``
and ``GET /api/studies/{id}/search`` (as dicts). Rendered through :mod:`normfree.api.plots`
(``to_div``: every label plain text), in its palette and layout."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from normfree.api.compare import mean_curve, metric_value
from normfree.api.figure import Figure, Trace, bar, scatter
from normfree.api.plots import DIVERGED_COLOR, LAYOUT, PALETTE

__all__ = ["compare_figure", "history_figure", "pruning_figure"]

# one colour per trial status on the search pages
STATUS_COLORS = {
    "COMPLETE": "#2ca02c",
    "PRUNED": "#ff7f0e",
    "DIVERGED": DIVERGED_COLOR,
    "FAILED": "#7f7f7f",
    "RUNNING": "#1f77b4",
    "WAITING": "#c7c7c7",
}


def _integer_axis(top: int, title: str) -> dict[str, Any]:
    """An axis of whole numbers (epochs, trial positions): no 0.5 ticks on a short range."""
    axis: dict[str, Any] = {"title": title, "tickformat": "d"}
    if top <= 20:
        axis["dtick"] = 1
    return axis


def _xy(trial: Mapping[str, Any], metric: str) -> tuple[list[int], list[float | None]]:
    curves = trial.get("curves") or []
    return [c["epoch"] for c in curves], [metric_value(c, metric) for c in curves]


def _curve(
    x: Sequence[Any],
    y: Sequence[Any],
    color: str,
    name: str,
    *,
    width: int | None = None,
    mode: str = "lines+markers",
    **more: Any,
) -> Trace:
    """One curve of values by epoch in ``color`` (``width``: the line's, in pixels)."""
    line = {"color": color} if width is None else {"color": color, "width": width}
    return scatter(x=x, y=y, mode=mode, line=line, name=name, **more)


def _points(
    trials: Sequence[Mapping[str, Any]],
    value: str,
    status: str,
    name: str,
    text: list[str],
    **marker: Any,
) -> Trace:
    """``trials`` as markers of their ``value`` in ask order, in the colour of ``status``."""
    return scatter(
        x=[t["order"] for t in trials], y=[t[value] for t in trials], mode="markers",
        marker={"color": STATUS_COLORS[status], "size": 9, **marker}, name=name, text=text,
        hovertemplate="trial %{x}: %{text}<br>%{y:.4g}<extra></extra>",
    )  # fmt: skip


def compare_figure(comparison: Mapping[str, Any]) -> Figure:
    """One metric of every chosen trial on one plot. Trials: one line each. Arms: each arm's
    mean per epoch, bold, over its seeds drawn thin in the same colour."""
    metric = comparison.get("metric") or "train_loss"
    trials = comparison.get("trials") or []
    fig = Figure()
    if comparison.get("mode") == "arms":
        by_id = {t["id"]: t for t in trials}
        for i, arm in enumerate(comparison.get("arms") or []):
            color = PALETTE[i % len(PALETTE)]
            members = [by_id[tid] for tid in arm["trial_ids"] if tid in by_id]
            for t in members:
                fig.add_trace(
                    _curve(
                        *_xy(t, metric),
                        color,
                        f"{arm['label']} seed {t['seed']}",
                        width=1,
                        mode="lines",
                        opacity=0.35,
                        legendgroup=arm["label"],
                        showlegend=False,
                        hovertemplate=f"trial {t['id']}, seed {t['seed']}<br>"
                        "epoch %{x}: %{y:.4g}<extra></extra>",
                    )
                )
            mean = f"{arm['label']} (mean of {len(members)})"
            fig.add_trace(
                _curve(*mean_curve(members, metric), color, mean, width=3, legendgroup=arm["label"])
            )
    else:
        for i, t in enumerate(trials):
            name = f"#{t['id']} {t['arm']} seed {t['seed']}"
            fig.add_trace(_curve(*_xy(t, metric), PALETTE[i % len(PALETTE)], name))
    top = max((c["epoch"] for t in trials for c in t.get("curves") or []), default=0)
    fig.update_layout(
        title=f"{metric} by epoch",
        xaxis=_integer_axis(top, "epoch"),
        yaxis_title=metric,
        **LAYOUT,
    )
    return fig


def history_figure(view: Mapping[str, Any]) -> Figure:
    """Optimisation history: each completed trial's objective in ask order, the best so far as
    a step line, and pruned trials at the last value they reported."""
    trials = view.get("trials") or []
    objective = view.get("objective") or "objective"
    fig = Figure()
    done = [t for t in trials if t.get("value") is not None]
    fig.add_trace(_points(done, "value", "COMPLETE", "complete", [t["arm"] for t in done]))
    pruned = [t for t in trials if t["status"] == "PRUNED" and t.get("last_value") is not None]
    if pruned:
        why = [f"{t['arm']}, pruned at epoch {t['pruned_at']}" for t in pruned]
        fig.add_trace(
            _points(pruned, "last_value", "PRUNED", "pruned (last reported)", why, symbol="x")
        )
    best = [(t["order"], t["best_so_far"]) for t in trials if t.get("best_so_far") is not None]
    if best:
        fig.add_trace(
            scatter(
                x=[b[0] for b in best],
                y=[b[1] for b in best],
                mode="lines",
                line={"shape": "hv", "color": "#444"},
                name="best so far",
            )
        )
    fig.update_layout(
        title=f"optimisation history ({view.get('direction', 'maximize')} {objective})",
        xaxis=_integer_axis(len(trials), "trial (in the order asked)"),
        yaxis_title=objective,
        **LAYOUT,
    )
    return fig


def pruning_figure(trials: Sequence[Mapping[str, Any]]) -> Figure:
    """Pruning timeline: one row per trial that ran, a bar over the epochs it ran, coloured by
    how it ended; a pruned trial's bar ends at the epoch its pruner stopped it."""
    ran = [t for t in trials if t.get("epochs_run")]
    fig = Figure()
    for status in STATUS_COLORS:
        group = [t for t in ran if t["status"] == status]
        if not group:
            continue
        fig.add_trace(
            bar(
                x=[t["epochs_run"] for t in group],
                y=[f"{t['order']}: {t['arm']}" for t in group],
                orientation="h",
                marker={"color": STATUS_COLORS[status]},
                name=status.lower(),
                text=[
                    f"pruned at epoch {t['pruned_at']}" if t.get("pruned_at") is not None else ""
                    for t in group
                ],
                hovertemplate="%{y}: %{x} epochs %{text}<extra></extra>",
            )
        )
    layout = dict(LAYOUT)
    layout["height"] = max(260, 22 * len(ran) + 140)
    fig.update_layout(
        title="pruning timeline (epochs each trial ran)",
        xaxis=_integer_axis(max((t["epochs_run"] for t in ran), default=0), "epochs run"),
        yaxis={
            "autorange": "reversed",
            "type": "category",
            "categoryorder": "array",
            "categoryarray": [f"{t['order']}: {t['arm']}" for t in ran],
        },
        barmode="overlay",
        **layout,
    )
    return fig
