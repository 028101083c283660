"""Plotly figures as plain dicts: what the pages' charts are built with.

Why not ``plotly.graph_objects``: a graph object validates every property it is given and deep
copies its data on each change, all in Python with the GIL held. A 171-arm board figure took
~20 ms to build that way on a 2-core host, and a server rebuilds the board and study pages after
each commit of a running study (five a second in bench/bench_live_reads.py): a fifth of the
interpreter went to validation while readers waited for the GIL (issue 27, point 1). The charts
here use a handful of properties that plotly.js documents and validates in the browser, so this
module builds the same JSON (``{"data": [...], "layout": {...}}``) directly, in well under a
millisecond. It keeps the graph-object spellings the builders read best in: plotly's "magic
underscores" (``marker_color``, ``xaxis_title``), ``add_hline``/``add_vline`` and a secondary y
axis, so a builder reads as plotly's documentation does.
"""

from __future__ import annotations

from typing import Any

# Properties whose name holds an underscore of its own (not a path into a nested property).
_WHOLE = frozenset({"error_x", "error_y"})


class Trace(dict[str, Any]):
    """One trace: a dict (what plotly.js reads) whose keys also read as attributes, as a graph
    object's do (``fig.data[0].hovertemplate``)."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


def _titled(key: str, value: Any) -> Any:
    """plotly's shorthand: a title given as a string is ``{"text": ...}``."""
    if key == "title" and isinstance(value, str):
        return {"text": value}
    if isinstance(value, dict):
        return {k: _titled(k, v) for k, v in value.items()}
    return value


def _merge(target: dict[str, Any], key: str, value: Any) -> None:
    """Set ``key`` (a magic-underscore path such as ``xaxis_title_text``) in ``target``, merging
    dicts into what is already there, as a graph object's ``update`` does."""
    if "_" in key and key not in _WHOLE:
        head, rest = key.split("_", 1)
        child = target.get(head)
        if not isinstance(child, dict):
            child = {"text": child} if head == "title" and isinstance(child, str) else {}
            target[head] = child
        _merge(child, rest, value)
        return
    value = _titled(key, value)
    if isinstance(value, dict) and isinstance(target.get(key), dict):
        for k, v in value.items():
            _merge(target[key], k, v)
    else:
        target[key] = value


def _trace(kind: str, props: dict[str, Any]) -> Trace:
    t = Trace(type=kind)
    for k, v in props.items():
        _merge(t, k, v)
    return t


def scatter(**props: Any) -> Trace:
    """A scatter trace (lines and/or markers)."""
    return _trace("scatter", props)


def bar(**props: Any) -> Trace:
    """A bar trace."""
    return _trace("bar", props)


def _line(props: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``line_*`` and ``annotation_*`` keywords of ``add_hline``/``add_vline`` split apart."""
    line: dict[str, Any] = {}
    note: dict[str, Any] = {}
    for k, v in props.items():
        prefix, _, rest = k.partition("_")
        if prefix == "line":
            line[rest] = v
        elif prefix == "annotation":
            note[rest] = v
        else:
            raise TypeError(f"unsupported keyword {k!r}")
    return line, note


class Figure:
    """A figure under construction: traces and a layout, plain JSON-ready dicts throughout."""

    def __init__(self, data: Trace | list[Trace] | None = None) -> None:
        self.data: list[Trace] = [] if data is None else [data] if isinstance(data, dict) else data
        self.layout: dict[str, Any] = {}

    def add_trace(self, trace: Trace, *, secondary_y: bool = False) -> Figure:
        if secondary_y:  # the right-hand axis, drawn over the first
            trace["yaxis"] = "y2"
            _merge(self.layout, "yaxis2", {"overlaying": "y", "side": "right"})
        self.data.append(trace)
        return self

    def update_layout(self, **props: Any) -> Figure:
        for k, v in props.items():
            _merge(self.layout, k, v)
        return self

    def update_yaxes(self, *, secondary_y: bool = False, **props: Any) -> Figure:
        axis = self.layout.setdefault("yaxis2" if secondary_y else "yaxis", {})
        for k, v in props.items():
            _merge(axis, k, v)
        return self

    def add_annotation(self, **props: Any) -> Figure:
        note: dict[str, Any] = {}
        for k, v in props.items():
            _merge(note, k, v)
        self.layout.setdefault("annotations", []).append(note)
        return self

    def _add_rule(self, axis: str, at: float, props: dict[str, Any]) -> Figure:
        """A line across the plot at ``axis`` = ``at`` (spanning the other axis' whole domain),
        with an optional label at its start (``annotation_text``; ``annotation_position``
        "top left"/"top right"/"bottom left"/"bottom right")."""
        line, note = _line(props)
        other = "y" if axis == "x" else "x"
        shape = {"type": "line", f"{axis}ref": axis, f"{axis}0": at, f"{axis}1": at}
        shape |= {f"{other}ref": f"{other} domain", f"{other}0": 0, f"{other}1": 1}
        if line:
            shape["line"] = line
        self.layout.setdefault("shapes", []).append(shape)
        if "text" in note:
            where = str(note.pop("position", "top right"))
            left = "left" in where
            label = {"text": note.pop("text"), "showarrow": False, f"{axis}ref": axis, axis: at}
            if axis == "y":
                label |= {"xref": "x domain", "x": 0 if left else 1}
                label |= {"xanchor": "left" if left else "right"}
                label["yanchor"] = "bottom" if "top" in where else "top"
            else:
                label |= {"yref": "y domain", "y": 1 if "top" in where else 0}
                label["xanchor"] = "right" if left else "left"
            label.update(note)
            self.layout.setdefault("annotations", []).append(label)
        return self

    def add_hline(self, y: float, **props: Any) -> Figure:
        return self._add_rule("y", y, props)

    def add_vline(self, x: float, **props: Any) -> Figure:
        return self._add_rule("x", x, props)

    def to_plotly_json(self) -> dict[str, Any]:
        """The figure as plotly.js reads it (no copies: callers escape into new dicts)."""
        return {"data": list(self.data), "layout": self.layout}
