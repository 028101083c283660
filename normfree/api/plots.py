"""Plotly figures for the dashboard, built from the same data the JSON endpoints return.

Each function takes plain data (the API's public schemas as dicts/lists), so a figure shows
exactly what ``/api/...`` answers and can be tested without a browser. :func:`to_div` renders a
figure as an HTML fragment that expects ``plotly.min.js`` to be loaded by the page already (the
app serves it from the installed plotly package: the dashboard needs no network).
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import plotly.io as pio

from normfree.api.figure import Figure, bar, scatter

# One colour per base function / layer, stable across pages (plotly's default qualitative set).
PALETTE = (
    "#636EFA",
    "#EF553B",
    "#00CC96",
    "#AB63FA",
    "#FFA15A",
    "#19D3F3",
    "#FF6692",
    "#B6E880",
    "#FF97FF",
    "#FECB52",
)
DIVERGED_COLOR = "#d62728"
# Every figure names its theme; plain_figure resolves the name (cached) for plotly.js.
LAYOUT = {
    "template": "plotly_white",
    "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
    "height": 420,
    "legend": {"orientation": "h", "y": -0.2},
}


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


# Keys whose strings are ours and hold plotly's template syntax and markup on purpose (the
# ``<br>`` and ``<extra>`` of a hover), or are a theme: never user text, never escaped.
_MARKUP_KEYS = frozenset({"hovertemplate", "texttemplate", "template"})


def plain(text: str) -> str:
    """``text`` shown as itself by plotly, whose labels accept a subset of HTML (``<a href>``,
    ``<span style>``, ``<b>``, ``<br>``) and entities: ``&``, ``<`` and ``>`` become entities,
    which plotly draws as the characters. A reference setting or a candidate label is text."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _plain_strings(value: Any, key: str = "") -> Any:
    """Every string in a figure's dict escaped with :func:`plain`, except under
    :data:`_MARKUP_KEYS` (labels, hovers, tick labels, titles and annotations alike: a colour or
    a mode has no ``<&>``, so escaping it changes nothing)."""
    if key in _MARKUP_KEYS:
        return value
    if isinstance(value, str):
        return plain(value)
    if isinstance(value, dict):
        return {k: _plain_strings(v, k) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_strings(v) for v in value]
    if getattr(value, "dtype", None) is not None and value.dtype.kind in "OUS":  # numpy text
        return [_plain_strings(v) for v in value.tolist()]
    return value


def plain_figure(fig: Figure) -> dict[str, Any]:
    """The figure as plotly's dict with every label plain text: the one way a figure leaves
    this module for a page (:func:`to_div`, :func:`to_json`)."""
    data = _plain_strings(fig.to_plotly_json())
    layout = data.get("layout") or {}
    if isinstance(layout.get("template"), str):  # a theme by name: plotly.js knows none
        layout["template"] = _template(layout["template"])
    return data


@functools.cache
def _template(name: str) -> dict[str, Any]:
    """A plotly theme as plotly.js reads it, resolved once per process."""
    return pio.templates[name].to_plotly_json()


def to_div(fig: Figure, div_id: str) -> str:
    """The figure as a <div> plus the script that draws it (plotly.js loaded by the page)."""
    return pio.to_html(
        plain_figure(fig),
        full_html=False,
        include_plotlyjs=False,
        div_id=div_id,
        config={"displaylogo": False, "responsive": True},
        validate=False,
    )


def warm() -> None:
    """Take the figures' first-use costs now: the theme's resolution (plotly builds it from its
    graph objects) and plotly.io's JSON encoder, which the first board page after a server's
    start paid (issue 27). A server calls this before it answers."""
    row = {"candidate": "f", "mean": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n": 2, "is_best": True}
    to_div(leaderboard_figure([row], "accuracy"), "warm")
    cell = {"candidate": "f", "value": 1.0, "mean": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n": 2}
    to_div(study_figure([cell], "accuracy", "shift"), "warm")


def to_json(fig: Figure) -> str:
    """The figure as plotly JSON (a page's live refresh), its labels plain text as in
    :func:`to_div`."""
    return pio.to_json(plain_figure(fig), validate=False)


def function_figure(u: Sequence[float], f: Sequence[float], df: Sequence[float], name: str):
    """f and f' of one candidate on one axis: the shape people compare candidates by."""
    fig = Figure()
    fig.add_trace(scatter(x=list(u), y=list(f), name=f"{name}(u)", mode="lines"))
    fig.add_trace(
        scatter(x=list(u), y=list(df), name=f"{name}'(u)", mode="lines", line={"dash": "dash"})
    )
    fig.update_layout(title=f"{name}: f and f'", xaxis_title="u", yaxis_title="value", **LAYOUT)
    fig.add_hline(y=0, line_width=1, line_color="#999")
    fig.add_vline(x=0, line_width=1, line_color="#999")
    return fig


def leaderboard_figure(rows: Sequence[dict[str, Any]], objective: str | None) -> Figure:
    """Mean with its 95% CI per candidate, best first: seed spread is visible at a glance."""
    ranked = [r for r in rows if _finite(r.get("mean"))]
    names = [r["candidate"] for r in ranked]
    means = [r["mean"] for r in ranked]
    hi = [(r["ci_high"] - r["mean"]) if _finite(r.get("ci_high")) else 0.0 for r in ranked]
    lo = [(r["mean"] - r["ci_low"]) if _finite(r.get("ci_low")) else 0.0 for r in ranked]
    colors = [
        "#2ca02c" if r.get("is_best") else ("#1f77b4" if r.get("indistinguishable") else "#7f7f7f")
        for r in ranked
    ]
    fig = Figure(
        scatter(
            x=means,
            y=names,
            mode="markers",
            marker={"color": colors, "size": 9},
            error_x={"type": "data", "array": hi, "arrayminus": lo, "visible": True},
            text=[f"n={r.get('n', 0)}, diverged={r.get('n_diverged', 0)}" for r in ranked],
            hovertemplate="%{y}: %{x:.4g} (%{text})<extra></extra>",
            name="mean ± 95% CI",
        )
    )
    layout = dict(LAYOUT)
    layout["height"] = max(300, 28 * len(ranked) + 120)
    fig.update_layout(
        title="mean ± 95% CI (green: best; blue: indistinguishable from best)",
        xaxis_title=objective or "objective",
        yaxis={"autorange": "reversed"},
        showlegend=False,
        **layout,
    )
    return fig


def study_figure(
    cells: Sequence[dict[str, Any]],
    objective: str | None,
    transform: str | None,
    baselines: Sequence[dict[str, Any]] = (),
) -> Figure:
    """A property study as one picture: metric vs transform value, one line per base function.

    Error bars are the 95% CI over seeds. A cell where any seed diverged gets a red cross (at its
    mean, or at the bottom of the axis when no seed finished) so failures are not silently absent.
    """
    fig = Figure()
    by_function: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for cell in cells:
        by_function[str(cell.get("function"))].append(cell)
    finite_means = [c["mean"] for c in cells if _finite(c.get("mean"))]
    floor = min(finite_means) if finite_means else 0.0
    div_x, div_y, div_text = [], [], []
    for i, (function, rows) in enumerate(sorted(by_function.items())):
        rows = sorted(rows, key=lambda c: (c.get("value") is None, c.get("value") or 0.0))
        xs = [c.get("value") for c in rows]
        ys = [c["mean"] if _finite(c.get("mean")) else None for c in rows]
        err_hi = [
            (c["ci_high"] - c["mean"])
            if _finite(c.get("ci_high")) and _finite(c.get("mean"))
            else 0.0
            for c in rows
        ]
        err_lo = [
            (c["mean"] - c["ci_low"])
            if _finite(c.get("ci_low")) and _finite(c.get("mean"))
            else 0.0
            for c in rows
        ]
        fig.add_trace(
            scatter(
                x=xs,
                y=ys,
                name=function,
                mode="lines+markers",
                line={"color": PALETTE[i % len(PALETTE)]},
                error_y={"type": "data", "array": err_hi, "arrayminus": err_lo, "visible": True},
                text=[f"n={c.get('n', 0)}, diverged={c.get('n_diverged', 0)}" for c in rows],
                customdata=[function] * len(rows),  # a label is data, never template text
                hovertemplate="%{customdata} @ %{x}: %{y:.4g} (%{text})<extra></extra>",
                connectgaps=False,
            )
        )
        for c in rows:
            if c.get("n_diverged"):
                div_x.append(c.get("value"))
                div_y.append(c["mean"] if _finite(c.get("mean")) else floor)
                div_text.append(f"{function} @ {c.get('value')}: {c['n_diverged']} diverged")
    if div_x:
        fig.add_trace(
            scatter(
                x=div_x,
                y=div_y,
                name="diverged",
                mode="markers",
                marker={"symbol": "x", "size": 13, "color": DIVERGED_COLOR, "line": {"width": 2}},
                text=div_text,
                hovertemplate="%{text}<extra></extra>",
            )
        )
    for b in baselines:  # reference arms (LayerNorm, ...) as labelled horizontal lines
        if _finite(b.get("mean")):
            fig.add_hline(
                y=b["mean"],
                line_dash="dot",
                line_color="#555",
                annotation_text=f"{b.get('function')} ({b['mean']:.4g})",
                annotation_position="top left",
            )
    fig.update_layout(
        title=f"{objective or 'objective'} vs {transform or 'transform'} value (mean ± 95% CI)",
        xaxis_title=f"{transform or 'transform'} value",
        yaxis_title=objective or "objective",
        **LAYOUT,
    )
    return fig


def options_figure(cells: Sequence[dict[str, Any]], objective: str | None) -> Figure:
    """Studies without a numeric axis (options, searches): a bar per arm with its CI."""
    rows = [c for c in cells if _finite(c.get("mean"))]
    labels = [str(c.get("label") or c.get("function")) for c in rows]
    fig = Figure(
        bar(
            x=labels,
            y=[c["mean"] for c in rows],
            error_y={
                "type": "data",
                "array": [
                    (c["ci_high"] - c["mean"]) if _finite(c.get("ci_high")) else 0 for c in rows
                ],
                "arrayminus": [
                    (c["mean"] - c["ci_low"]) if _finite(c.get("ci_low")) else 0 for c in rows
                ],
            },
            marker_color=[DIVERGED_COLOR if c.get("n_diverged") else "#1f77b4" for c in rows],
            name=objective or "objective",
        )
    )
    fig.update_layout(
        title=f"{objective or 'objective'} per arm (red: some seeds diverged)",
        yaxis_title=objective or "objective",
        **LAYOUT,
    )
    return fig


def curves_figure(curves: Sequence[dict[str, Any]]) -> Figure:
    """Learning curves: losses on the left axis, each validation metric on the right."""
    fig = Figure()
    epochs = [c["epoch"] for c in curves]
    lm = "lines+markers"
    fig.add_trace(
        scatter(x=epochs, y=[c.get("train_loss") for c in curves], name="train loss", mode=lm)
    )
    if any(c.get("val_loss") is not None for c in curves):
        fig.add_trace(
            scatter(x=epochs, y=[c.get("val_loss") for c in curves], name="val loss", mode=lm)
        )
    # Losses already have their own traces; the right axis is for the other metrics.
    metric_names = sorted(
        {k for c in curves for k in (c.get("metrics") or {})} - {"train_loss", "val_loss"}
    )
    for name in metric_names:
        fig.add_trace(
            scatter(
                x=epochs,
                y=[(c.get("metrics") or {}).get(name) for c in curves],
                name=name,
                mode=lm,
                line={"dash": "dot"},
            ),
            secondary_y=True,
        )
    fig.update_layout(title="learning curves", xaxis_title="epoch", **LAYOUT)
    fig.update_yaxes(title_text="loss", secondary_y=False)
    fig.update_yaxes(title_text="metric", secondary_y=True)
    return fig


def _by_layer(diagnostics: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    layers: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for d in diagnostics:
        layers[str(d["layer"])].append(d)
    for rows in layers.values():
        rows.sort(key=lambda d: d["epoch"])
    return dict(layers)


def alpha_figure(diagnostics: Sequence[dict[str, Any]]) -> Figure:
    """alpha against 1/std of the norm's input, per layer, traced over epochs.

    LayerNorm divides by the input's std; a pointwise norm that learns alpha close to 1/std is
    doing the same job, which is the DyT paper's observation. The dashed diagonal is alpha = 1/std.
    """
    fig = Figure()
    xs_all: list[float] = []
    for i, (layer, rows) in enumerate(sorted(_by_layer(diagnostics).items())):
        pts = [
            (1.0 / d["input_std"], d["alpha"], d["epoch"])
            for d in rows
            if _finite(d.get("alpha")) and _finite(d.get("input_std")) and d["input_std"] > 0
        ]
        if not pts:
            continue
        xs_all.extend(p[0] for p in pts)
        fig.add_trace(
            scatter(
                x=[p[0] for p in pts],
                y=[p[1] for p in pts],
                mode="lines+markers",
                name=layer,
                line={"color": PALETTE[i % len(PALETTE)]},
                marker={"size": [4 + 6 * (k == len(pts) - 1) for k in range(len(pts))]},
                text=[f"{layer} epoch {p[2]}" for p in pts],
                hovertemplate="%{text}: 1/std=%{x:.3g}, alpha=%{y:.3g}<extra></extra>",
            )
        )
    if xs_all:
        lo, hi = min(xs_all), max(xs_all)
        fig.add_trace(
            scatter(
                x=[lo, hi],
                y=[lo, hi],
                mode="lines",
                name="alpha = 1/std",
                line={"dash": "dash", "color": "#999"},
            )
        )
    fig.update_layout(
        title="alpha vs 1/std of the norm input (per layer, over epochs; big marker = last)",
        xaxis_title="1 / std(norm input)",
        yaxis_title="alpha",
        **LAYOUT,
    )
    return fig


def layers_figure(diagnostics: Sequence[dict[str, Any]]) -> Figure:
    """Per layer at the last epoch: gamma mean ± std, and the residual branch's output norm."""
    last: dict[str, dict[str, Any]] = {}
    for layer, rows in _by_layer(diagnostics).items():
        last[layer] = rows[-1]
    layers = list(last)
    # Two panels side by side: the gamma bars on the first axes, the branch norms on the second.
    fig = Figure()
    fig.add_trace(
        bar(
            x=layers,
            y=[last[k].get("gamma_mean") for k in layers],
            error_y={"type": "data", "array": [last[k].get("gamma_std") or 0 for k in layers]},
            name="gamma",
        )
    )
    fig.add_trace(
        bar(
            x=layers,
            y=[last[k].get("branch_norm") for k in layers],
            name="branch norm",
            xaxis="x2",
            yaxis="y2",
        )
    )
    fig.update_layout(
        xaxis={"domain": [0, 0.45]},
        xaxis2={"domain": [0.55, 1], "anchor": "y2"},
        yaxis2={"anchor": "x2"},
    )
    for x, text in ((0.225, "gamma (mean ± std)"), (0.775, "residual-branch norm (RMS)")):
        fig.add_annotation(
            text=text, x=x, y=1, xref="paper", yref="paper", xanchor="center",
            yanchor="bottom", showarrow=False,
        )  # fmt: skip
    epoch = max((d["epoch"] for d in last.values()), default=0)
    fig.update_layout(title=f"per-layer parameters at epoch {epoch}", showlegend=False, **LAYOUT)
    return fig


def importance_figure(importance: dict[str, Any] | None) -> Figure:
    """Which properties predicted good results in a study: Spearman rho per property with its
    95% bootstrap interval (``workers.importance``), strongest first; constant ones left out."""
    feats = [f for f in (importance or {}).get("features", []) if _finite(f.get("rho"))]
    names = [f["name"] for f in feats]
    rho = [f["rho"] for f in feats]
    hi = [f["ci_high"] - f["rho"] if _finite(f.get("ci_high")) else 0.0 for f in feats]
    lo = [f["rho"] - f["ci_low"] if _finite(f.get("ci_low")) else 0.0 for f in feats]
    colors = ["#2ca02c" if r > 0 else DIVERGED_COLOR for r in rho]
    fig = Figure(
        bar(
            x=rho,
            y=names,
            orientation="h",
            marker={"color": colors},
            error_x={"type": "data", "array": hi, "arrayminus": lo, "visible": True},
            hovertemplate="%{y}: rho %{x:.2f}<extra></extra>",
            name="Spearman rho",
        )
    )
    layout = dict(LAYOUT)
    layout["height"] = max(260, 30 * len(feats) + 120)
    n = (importance or {}).get("n_candidates", 0)
    note = (importance or {}).get("note")
    constant = [f["name"] for f in (importance or {}).get("features", []) if f.get("constant")]
    if constant and not note:
        note = "constant here: " + ", ".join(constant)
    fig.update_layout(
        title=f"property importance over {n} candidates" + (f" ({note})" if note else ""),
        xaxis={"title": "Spearman rho with the result (95% CI)", "range": [-1, 1]},
        yaxis={"autorange": "reversed"},
        showlegend=False,
        **layout,
    )
    return fig


def _failed_position(values: Sequence[float], higher_is_better: bool) -> float:
    """Where a 'failed to train' point sits on an axis: beyond the worst value."""
    finite = [v for v in values if _finite(v)]
    if not finite:
        return 0.0
    lo, hi = min(finite), max(finite)
    pad = 0.25 * (hi - lo) if hi > lo else max(abs(lo) * 0.05, 0.05)
    return lo - pad if higher_is_better else hi + pad


def fidelity_figure(setting: dict[str, Any]) -> Figure:
    """Proxy mean +- 95% CI against the reference value for one setting of a fidelity report.

    A reference interval is a horizontal error bar; "failed to train" (either side) sits just
    beyond the worst value of its axis, marked with an x. Points on a rising diagonal (falling,
    when the two metrics point opposite ways) mean the proxy orders cells as the reference.
    """
    cells = setting["cells"]
    ref_up = setting["direction"] == "maximize"
    metric = setting["proxy_metric"]
    xs = [c["reference"]["value"] for c in cells]
    ys = [c["proxy"]["mean"] for c in cells]
    proxy_up = setting.get("proxy_direction", "maximize") == "maximize"
    x_fail = _failed_position(xs, ref_up)
    y_fail = _failed_position(ys, proxy_up)
    fig = Figure()
    for group, failed in (("trained", False), ("failed to train (either side)", True)):
        pts = [c for c in cells if (c["reference"]["failed"] or c["proxy"]["failed"]) == failed]
        if not pts:
            continue
        x = [x_fail if c["reference"]["failed"] else c["reference"]["value"] for c in pts]
        y = [y_fail if c["proxy"]["failed"] else c["proxy"]["mean"] for c in pts]
        err_y = [
            None
            if c["proxy"]["failed"] or c["proxy"]["ci_high"] is None
            else c["proxy"]["ci_high"] - c["proxy"]["mean"]
            for c in pts
        ]
        err_x = [
            None
            if c["reference"]["failed"] or c["reference"]["high"] is None
            else c["reference"]["high"] - c["reference"]["value"]
            for c in pts
        ]
        fig.add_trace(
            scatter(
                x=x,
                y=y,
                mode="markers+text",
                name=group,
                text=[c["cell"] for c in pts],
                textposition="top center",
                marker={
                    "size": 10,
                    "symbol": "x" if failed else "circle",
                    "color": DIVERGED_COLOR if failed else PALETTE[0],
                },
                error_y={"type": "data", "array": [e or 0 for e in err_y], "visible": True},
                error_x={"type": "data", "array": [e or 0 for e in err_x], "visible": True},
                hovertemplate="%{text}<br>reference %{x}<br>proxy %{y}<extra></extra>",
            )
        )
    rho = setting.get("spearman")
    title = setting["setting"]
    if rho is not None:
        title += f" (Spearman {rho:+.2f})"
    fig.update_layout(
        **LAYOUT,
        title=title,
        xaxis_title=f"reference: {setting['metric']} ({setting['direction']})",
        yaxis_title=f"proxy: {metric}, mean ± 95% CI",
    )
    return fig
