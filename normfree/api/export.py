"""Exports: trials, arms and leaderboards as flat tables, written as CSV, Parquet or JSON.

One place builds the tables and writes the files, so that ``GET ...?format=csv|parquet``, the
``normfree export`` command and :class:`normfree.Client` hand out the same columns and the same
numbers as the JSON the API answers (the round-trip tests compare them).

A table is a list of flat records: a nested mapping (a trial's ``config``, its ``metrics``, an
arm's ``options``) becomes dotted columns (``config.epochs``, ``metrics.val_acc``), a list becomes
its JSON text. Columns keep the order they are first seen in, so a file reads left to right as
the JSON does. CSV cells go through :mod:`normfree.csvsafe` (a cell a spreadsheet would run as a
formula is text). Parquet keeps types: a column whose values mix kinds (a number in one row, a
word in another) is written as text rather than refused.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from normfree import csvsafe

if TYPE_CHECKING:
    from starlette.responses import Response

    from normfree.api.services import ServiceState

Format = Literal["json", "csv", "parquet"]
FILE_FORMATS: tuple[str, ...] = ("csv", "parquet", "json")
MEDIA_TYPES = {
    "csv": "text/csv; charset=utf-8",
    "parquet": "application/vnd.apache.parquet",
    "json": "application/json",
}
FORMAT_HELP = (
    "json (the default: the API's document), csv (a flat table, one row per item; cells a "
    "spreadsheet would run as formulas are quoted as text) or parquet (the same table, typed)."
)
# OpenAPI: what a route with ``?format=`` answers beside its JSON.
FILE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The JSON document, or with format=csv|parquet the items as a file.",
        "content": {
            "text/csv": {"schema": {"type": "string"}},
            "application/vnd.apache.parquet": {"schema": {"type": "string", "format": "binary"}},
        },
    },
    406: {"description": "format=parquet on a server without pyarrow."},
}
PARQUET_MISSING = (
    "parquet export needs pyarrow where the table is written (pip install 'normfree[export]'); "
    "format=csv needs nothing more"
)


class ExportUnavailable(RuntimeError):
    """Parquet asked for where pyarrow is not installed."""


# --------------------------------------------------------------------------------- flattening


def flatten(record: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``record`` with nested mappings as dotted keys and lists as JSON text; non-finite
    floats become None (a file, like the API's JSON, has no NaN)."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            if value:
                out.update(flatten(value, name + "."))
            continue
        if isinstance(value, list | tuple):
            value = json.dumps(value, default=str, sort_keys=True) if value else None
        elif isinstance(value, float) and not math.isfinite(value):
            value = None
        elif value is not None and not isinstance(value, str | int | float | bool):
            value = str(value)  # datetimes and the like: their text, as in the JSON
        out[name] = value
    return out


def columns_of(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every key of ``rows``, in the order first seen."""
    seen: dict[str, None] = {}
    for r in rows:
        for k in r:
            seen.setdefault(k, None)
    return list(seen)


# ------------------------------------------------------------------------------------ writers


def to_csv(rows: Sequence[Mapping[str, Any]]) -> bytes:
    """The table as UTF-8 CSV with a header row (an empty table: an empty file)."""
    columns = columns_of(rows)
    buf = io.StringIO()
    if columns:
        writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for r in rows:
            # str of a float is its shortest text that reads back as the same float
            writer.writerow(csvsafe.row({c: r.get(c) for c in columns}))
    return buf.getvalue().encode()


def to_parquet(rows: Sequence[Mapping[str, Any]]) -> bytes:
    """The table as Parquet, one typed column per key (a mixed column as text)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ExportUnavailable(PARQUET_MISSING) from None
    columns = columns_of(rows)
    arrays = {c: pa.array(_uniform([r.get(c) for r in rows])) for c in columns}
    table = pa.table(arrays) if arrays else pa.table({})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _uniform(values: list[Any]) -> list[Any]:
    """A column pyarrow can type: numbers (ints and floats together as floats), booleans or
    text alone; anything mixed becomes text."""
    kinds = {type(v) for v in values if v is not None}
    if not kinds or len(kinds) == 1 or kinds == {int, float}:
        if kinds == {int, float}:
            return [None if v is None else float(v) for v in values]
        return values
    return [None if v is None else (v if isinstance(v, str) else json.dumps(v)) for v in values]


def to_json(rows: Sequence[Mapping[str, Any]]) -> bytes:
    """The table as a JSON array of flat records (the file form of ``--format json``)."""
    return json.dumps(list(rows), default=str).encode()


def encode(rows: Sequence[Mapping[str, Any]], fmt: str) -> bytes:
    """The table in ``fmt`` (csv, parquet or json)."""
    writers = {"csv": to_csv, "parquet": to_parquet, "json": to_json}
    if fmt not in writers:
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FILE_FORMATS)}")
    return writers[fmt](rows)


def respond(rows: Sequence[Mapping[str, Any]], fmt: str, filename: str) -> Response:
    """An HTTP answer with the table as a file download (``filename`` without extension)."""
    from starlette.responses import Response

    from normfree.api.errors import ApiError

    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", filename)[:120]
    try:
        body = encode(rows, fmt)
    except ExportUnavailable as exc:
        raise ApiError(406, "format_unavailable", str(exc)) from None
    return Response(
        body,
        media_type=MEDIA_TYPES[fmt],
        headers={
            "Content-Disposition": f'attachment; filename="{safe}.{fmt}"',
            "Cache-Control": "no-cache",
        },
    )


# ------------------------------------------------------------------------------------- tables


def trial_rows(state: ServiceState, study_id: int, status: list[str] | None = None) -> list[dict]:
    """One flat record per trial of the study (or those in ``status``), in id order: its
    columns, ``axis.*``, ``metrics.*``, ``config.*`` and ``diag.*`` (the summary of
    ``storage.exports.diagnostics_summary``). 404 when there is no such study."""
    from normfree.api.errors import not_found
    from normfree.storage import exports
    from normfree.workers.errors import public_error, public_worker

    if state.repo.get_study(study_id) is None:
        raise not_found("study", study_id)
    with state.db.read() as conn:
        trials = exports.study_trials(conn, study_id, status)
        diags = exports.diagnostics_summary(conn, study_id)
    out = []
    for t in trials:
        config = t.pop("config", None)
        axes = t.pop("axis_values", None)
        metrics = t.pop("metrics", None)
        t["error"] = public_error(t.get("error"), t.get("worker"))  # as an anonymous reader
        t["worker"] = public_worker(t.get("worker"))
        record = {
            **t,
            "axis": axes if isinstance(axes, Mapping) else {},
            "metrics": metrics if isinstance(metrics, Mapping) else {},
            "diag": diags.get(t["id"], {}),
            "config": config if isinstance(config, Mapping) else {},
        }
        out.append(flatten(record))
    return out


# A curve's points leave long: one row per (trial, epoch, metric). Proxies report different
# metrics (val_acc, val_fd, ...), so a wide table would be mostly empty columns, while a long
# one is what pandas groups, pivots (``pivot_table(index=["trial_id", "epoch"],
# columns="metric", values="value")``) and plots (seaborn's ``hue="metric"``) directly.
CURVE_COLUMNS = (
    "study_id", "trial_id", "candidate", "seed", "status", "epoch", "step", "wall_time_s",
    "metric", "value",
)  # fmt: skip
# Per-point fields that are the point's coordinates, not metrics (``trial_metrics`` columns).
_CURVE_READ = ("epoch", "step", "train_loss", "val_loss", "metrics", "lr", "wall_time")


def curve_rows(
    state: ServiceState, study_id: int, trials: Sequence[int] | None = None
) -> list[dict]:
    """The learning curves of the study's trials (or of ``trials``, ids of its trials) in long
    form (:data:`CURVE_COLUMNS`), by trial id, epoch, then metric: ``train_loss``, the epoch's
    validation metrics (``val_loss``, ``val_acc``, ... as ``GET /api/trials/{id}`` lists them
    under ``curves[].metrics``), then ``lr``. A value not recorded, or not finite, has no row.
    404 for no such study or an id that is not one of its trials."""
    from normfree.api.errors import ApiError, not_found
    from normfree.storage import curves

    if state.repo.get_study(study_id) is None:
        raise not_found("study", study_id)
    with state.db.read() as conn:
        heads = curves.trial_heads(conn, study_id=study_id)
        if trials is not None:
            wanted = set(trials)
            missing = sorted(wanted - {h["id"] for h in heads})
            if missing:
                shown = ", ".join(map(str, missing[:5]))
                raise ApiError(404, "not_found", f"study {study_id} has no trial {shown}")
            heads = [h for h in heads if h["id"] in wanted]
        points = curves.curves_of(conn, [h["id"] for h in heads], _CURVE_READ)
    out: list[dict] = []
    for h in heads:
        head = {"study_id": h["study_id"], "trial_id": h["id"]}
        head.update((k, h[k]) for k in ("candidate", "seed", "status"))
        for p in points[h["id"]]:
            at = {"epoch": p["epoch"], "step": p["step"], "wall_time_s": p["wall_time"]}
            values = {"train_loss": p["train_loss"], "val_loss": p["val_loss"]}
            values.update(p["metrics"])  # the epoch's validation metrics, val_loss among them
            values["lr"] = p["lr"]
            out.extend(
                {**head, **at, "metric": name, "value": float(v)}
                for name, v in values.items()
                if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            )
    return out


def arm_rows(state: ServiceState, study_id: int) -> list[dict]:
    """One flat record per arm (cell) of the study, as ``GET /api/studies/{id}`` shows its
    cells, with the study's objective and direction."""
    from normfree.api import services

    study = services.get_study(state, study_id, trials=False)
    head = {"study_id": study.id, "objective": study.objective, "direction": study.direction}
    return [flatten({**head, **c.model_dump(mode="json")}) for c in study.cells]


def leaderboard_rows(
    state: ServiceState,
    proxy: str,
    *,
    group: str | None = None,
    properties: list[str] | None = None,
    study_id: int | None = None,
    archived: bool = False,
) -> list[dict]:
    """One flat record per arm of ``proxy``'s leaderboard, as ``GET /api/leaderboards/{proxy}``
    ranks them (same filters, archived studies and arms only with ``archived``), with the
    proxy, objective and direction on each row."""
    from normfree.api import reads

    board = reads.leaderboard(
        state,
        proxy,
        group=group,
        properties=properties,
        study_id=study_id,
        archived=archived,
        line=False,  # the rows are the file; the fidelity line is not in it
    )
    head = {"proxy": board.proxy, "objective": board.objective, "direction": board.direction}
    return [flatten({**head, **r.model_dump(mode="json")}) for r in board.rows]


__all__ = [
    "CURVE_COLUMNS",
    "FILE_FORMATS",
    "FILE_RESPONSES",
    "FORMAT_HELP",
    "MEDIA_TYPES",
    "ExportUnavailable",
    "Format",
    "arm_rows",
    "columns_of",
    "curve_rows",
    "encode",
    "flatten",
    "leaderboard_rows",
    "respond",
    "to_csv",
    "to_json",
    "to_parquet",
    "trial_rows",
]
