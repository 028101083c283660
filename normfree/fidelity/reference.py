"""Reference results: published at-scale outcomes that a proxy is judged against.

A reference set is a citation plus rows. A row says: in this *setting* (``"ViT-B ImageNet top-1
%"``), this *cell* (a function in the catalog's own language, with the operator options that
make it the published operator: Derf is ``erf`` with a scalar shift) reached this *value* (a
point, or an interval when the source gives a range), or *failed to train* (a value of its own,
never a number). Everything a row needs to be compared with a proxy is on the row: the model
family it speaks about, the kind of metric, its direction, and the *resolution* of the setting
(differences at or below it are within the source's seed noise and are not claimed).

Rows are validated when a set is built (``ReferenceSet.model_validate``, :func:`from_csv`):
numbers are finite, a failed row carries no value, the rows of one setting agree on family,
metric, direction and resolution, no cell appears twice in a setting, and every cell resolves
through the catalog (:func:`cell_key`): an unknown name is refused with the parser's reason and
the row number, and nothing of a refused set is stored.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import re
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from normfree import csvsafe
from normfree.specs import BASELINES, expand_alias, operator_label

Family = Literal["vit", "dit"]
# What the number measures, which decides the proxy metric it is compared with (see report.py):
# accuracy/fid/loss -> the proxy's objective (fid -> its FD score where the trials measured one),
# train_loss -> the train-set loss in eval mode after training (the Derf paper's App. E).
MetricKind = Literal["accuracy", "fid", "loss", "train_loss"]
Direction = Literal["maximize", "minimize"]
Shift = Literal["none", "scalar", "channel"]

NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,99}")  # whole names only: fullmatch
MAX_ROWS = 5000
CSV_COLUMNS = (
    "setting",
    "family",
    "metric",
    "direction",
    "resolution",
    "function",
    "shift",
    "alpha",
    "value",
    "value_low",
    "value_high",
    "failed",
    "note",
)
REQUIRED_COLUMNS = ("setting", "family", "metric", "direction", "function")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Cell(_Model):
    """An operator configuration in the catalog's language.

    ``function``: a baseline (``layernorm``, ``rmsnorm``, ``identity``), a catalog name
    (``erf``), a transform call (``shift_h(erf, 1)``) or a formula; the papers' names ``derf``
    and ``dyt`` are accepted and expanded (Derf = erf with a scalar shift, DyT = tanh without).
    ``shift``: the operator's s (science.md 1). ``alpha``: None when alpha is learnable (the
    operator's default, init 0.5); a number when alpha is fixed at that value (the DyT paper's
    "without alpha" ablation is ``alpha = 1``: y = gamma * tanh(x) + beta).
    """

    function: str = Field(min_length=1, max_length=300)
    shift: Shift = "none"
    alpha: float | None = None

    @field_validator("function")
    @classmethod
    def _strip(cls, v: str) -> str:
        return v.strip()

    @field_validator("alpha")
    @classmethod
    def _alpha(cls, v: float | None) -> float | None:
        if v is not None and not (math.isfinite(v) and 0 < abs(v) <= 1e3):
            raise ValueError("a fixed alpha must be a finite non-zero number (|alpha| <= 1000)")
        return v

    def expanded(self) -> Cell:
        """The cell with a paper alias replaced by its operator (``derf`` -> erf + s)."""
        function, shift = expand_alias(self.function, self.shift)
        if function == self.function:
            return self
        return self.model_copy(update={"function": function, "shift": shift})

    def norm_fields(self) -> dict[str, Any]:
        """The NormSpec fields that train this cell (name, shift, alpha0, learn_alpha)."""
        c = self.expanded()
        out: dict[str, Any] = {"name": c.function}
        if c.function.lower() in BASELINES:
            return out
        if c.shift != "none":
            out["shift"] = c.shift
        if c.alpha is not None:
            out.update(alpha0=c.alpha, learn_alpha=False)
        return out

    @property
    def label(self) -> str:
        """Short readable name (``specs.operator_label``, as leaderboard arms are named):
        ``erf + s``, ``tanh (alpha fixed at 1)``."""
        return operator_label(self.function, self.shift, self.alpha)


class ReferenceRow(_Model):
    """One published outcome (see the module docstring)."""

    setting: str = Field(min_length=1, max_length=200)
    family: Family
    metric: MetricKind
    direction: Direction
    resolution: float = Field(default=0.0, ge=0.0)
    cell: Cell
    value_low: float | None = None
    value_high: float | None = None
    failed: bool = False
    note: str = Field(default="", max_length=1000)

    @model_validator(mode="after")
    def _values(self) -> ReferenceRow:
        for v in (self.value_low, self.value_high, self.resolution):
            if v is not None and not math.isfinite(v):
                raise ValueError("values and resolution must be finite numbers")
        if self.failed and (self.value_low is not None or self.value_high is not None):
            raise ValueError("a row that failed to train carries no value")
        if (self.value_low is None) != (self.value_high is None):
            raise ValueError("give both value_low and value_high (or one value)")
        if self.value_low is not None and self.value_high < self.value_low:  # type: ignore[operator]
            raise ValueError("value_low is above value_high")
        return self

    @property
    def value(self) -> float | None:
        """The midpoint of the row's interval (the value itself for a point)."""
        if self.value_low is None or self.value_high is None:
            return None
        return (self.value_low + self.value_high) / 2


class ReferenceSet(_Model):
    """A named, cited set of reference rows."""

    name: str
    title: str = Field(default="", max_length=300)
    source: str = Field(min_length=1, max_length=4000)  # the citation(s)
    description: str = Field(default="", max_length=4000)
    rows: list[ReferenceRow] = Field(min_length=1, max_length=MAX_ROWS)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.fullmatch(v):
            raise ValueError(
                "a reference set name is 1-100 characters of a-z, 0-9, '-', '_' and '.', "
                "starting with a letter or digit"
            )
        return v

    @model_validator(mode="after")
    def _consistent(self) -> ReferenceSet:
        errors: list[str] = []
        first: dict[str, tuple[int, ReferenceRow]] = {}
        seen: dict[tuple[str, str], int] = {}
        for i, row in enumerate(self.rows, start=1):
            if row.setting in first:
                j, ref = first[row.setting]
                for attr in ("family", "metric", "direction", "resolution"):
                    if getattr(row, attr) != getattr(ref, attr):
                        errors.append(
                            f"row {i}: {attr} {getattr(row, attr)!r} differs from row {j}'s "
                            f"{getattr(ref, attr)!r} in setting {row.setting!r}"
                        )
            else:
                first[row.setting] = (i, row)
            try:
                key = cell_key(row.cell)
            except ValueError as exc:
                errors.append(f"row {i}: cell {row.cell.function!r}: {exc}")
                continue
            if (row.setting, key) in seen:
                errors.append(
                    f"row {i}: cell {row.cell.label!r} appears twice in setting {row.setting!r} "
                    f"(first at row {seen[(row.setting, key)]})"
                )
            seen.setdefault((row.setting, key), i)
        if errors:
            raise ValueError("; ".join(errors[:20]) + (" ..." if len(errors) > 20 else ""))
        return self

    def digest(self) -> str:
        """A hash of the set's content (caches key reports on it)."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]

    def settings(self) -> list[str]:
        """Setting names in first-seen order."""
        return list(dict.fromkeys(r.setting for r in self.rows))


class ReferenceError(ValueError):
    """A reference set refused, with every reason (row numbers are 1-based data rows)."""


# --------------------------------------------------------------------------- cells -> keys
def _fingerprint(function: str) -> str:
    """The behavioural fingerprint of a catalog name, transform call or formula."""
    from normfree.search_space import ExpressionError, catalog

    try:
        return catalog.resolve(function).fingerprint
    except ExpressionError as exc:
        raise ValueError(str(exc)) from None


@lru_cache(maxsize=4096)
def _function_key(function: str, formula: str | None = None) -> str:
    name = function.strip()
    if formula is None and name.lower() in BASELINES:
        return f"baseline:{name.lower()}"
    return "f:" + _fingerprint(formula if formula is not None else name)


def cell_key(cell: Cell) -> str:
    """The identity of a cell: what it computes, not how it is spelled.

    ``shift_h(erf, 0)`` and ``erf`` are one function (same fingerprint); options (shift, fixed
    alpha) are part of the key; baselines ignore them and refuse them. ValueError for a name the
    catalog does not know, with the parser's reason.
    """
    c = cell.expanded()
    fkey = _function_key(c.function)
    if fkey.startswith("baseline:"):
        if c.shift != "none" or c.alpha is not None:
            raise ValueError("shift and alpha are options of pointwise functions, not baselines")
        return fkey
    alpha = "learn" if c.alpha is None else f"{c.alpha:.6g}"
    return f"{fkey}|{c.shift}|{alpha}"


def norm_cell_key(norm: dict[str, Any]) -> str | None:
    """The cell key of a trial's stored NormSpec (JSON), or None when it cannot be resolved
    (a stored user candidate whose formula was not kept: it matches no reference row)."""
    name = str(norm.get("name", ""))
    formula = norm.get("formula")
    name, shift = expand_alias(name, norm.get("shift", "none"), formula)
    try:
        fkey = _function_key(name, formula)
    except ValueError:
        return None
    if fkey.startswith("baseline:"):
        return fkey
    alpha = "learn" if norm.get("learn_alpha", True) else f"{float(norm.get('alpha0', 0.5)):.6g}"
    return f"{fkey}|{shift}|{alpha}"


# ----------------------------------------------------------------------------- parsing
def _number(text: str, what: str) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not a number") from None
    if not math.isfinite(v):
        raise ValueError(f"{what} must be finite, got {text!r}")
    return v


_TRUE = ("1", "true", "yes", "y", "failed")
_FALSE = ("", "0", "false", "no", "n")


def _row_from_csv(rec: dict[str, str]) -> dict[str, Any]:
    """One CSV record as ReferenceRow fields. ``value`` may be a number or ``failed``."""
    get = {k: csvsafe.uncell((rec.get(k) or "").strip()) for k in CSV_COLUMNS}
    failed_text = get["failed"].lower()
    if failed_text not in _TRUE + _FALSE:
        raise ValueError(f"failed must be true or false, got {get['failed']!r}")
    failed = failed_text in _TRUE
    value_text = get["value"]
    if value_text.lower() in ("failed", "fail", "failed to train"):
        failed, value_text = True, ""
    value = _number(value_text, "value")
    low, high = _number(get["value_low"], "value_low"), _number(get["value_high"], "value_high")
    if value is not None and (low is not None or high is not None):
        raise ValueError("give value, or value_low and value_high, not both")
    if value is not None:
        low = high = value
    alpha_text = get["alpha"].lower()
    alpha = None if alpha_text in ("", "learnable", "learn") else _number(alpha_text, "alpha")
    return {
        "setting": get["setting"],
        "family": get["family"].lower(),
        "metric": get["metric"].lower(),
        "direction": get["direction"].lower(),
        "resolution": _number(get["resolution"], "resolution") or 0.0,
        "cell": {
            "function": get["function"],
            "shift": get["shift"].lower() or "none",
            "alpha": alpha,
        },
        "value_low": low,
        "value_high": high,
        "failed": failed,
        "note": get["note"],
    }


def _pydantic_reason(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors():
        loc = ".".join(str(x) for x in e["loc"] if x != "__root__")
        msg = str(e["msg"]).removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def from_csv(text: str, *, name: str, source: str, title: str = "", description: str = ""):
    """A ReferenceSet from CSV text (header row; columns in ``CSV_COLUMNS``; see README).

    Raises :class:`ReferenceError` listing every bad row; nothing is returned half-built.
    """
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    header = [h.strip() for h in (reader.fieldnames or [])]
    repeated = sorted({c for c in header if header.count(c) > 1})
    if repeated:  # csv.DictReader keeps the last of two equal columns: refuse, lose nothing
        raise ReferenceError(f"CSV header: the columns {repeated} appear more than once")
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    unknown = [c for c in header if c not in CSV_COLUMNS]
    if missing or unknown:
        raise ReferenceError(
            f"CSV header: missing columns {missing}, unknown columns {unknown}; "
            f"columns are {list(CSV_COLUMNS)}"
        )
    reader.fieldnames = header
    rows, errors = [], []
    for i, rec in enumerate(reader, start=1):
        if i > MAX_ROWS:
            raise ReferenceError(f"more than {MAX_ROWS} rows")
        if not any((v or "").strip() for v in rec.values() if isinstance(v, str)):
            continue  # blank line
        try:
            row = ReferenceRow.model_validate(_row_from_csv(rec))
        except ValidationError as exc:
            errors.append(f"row {i}: {_pydantic_reason(exc)}")
            continue
        except ValueError as exc:
            errors.append(f"row {i}: {exc}")
            continue
        try:
            cell_key(row.cell)  # resolve now, so every bad row is reported in one answer
        except ValueError as exc:
            errors.append(f"row {i}: cell {row.cell.function!r:.80}: {exc}")
            continue
        rows.append(row)
    if errors:
        raise ReferenceError("; ".join(errors[:20]) + (" ..." if len(errors) > 20 else ""))
    return build_set(
        {"name": name, "title": title, "source": source, "description": description, "rows": rows}
    )


def build_set(data: dict[str, Any] | ReferenceSet) -> ReferenceSet:
    """Validate a set given as JSON-like data; :class:`ReferenceError` with every reason."""
    if isinstance(data, ReferenceSet):
        return data
    try:
        return ReferenceSet.model_validate(data)
    except ValidationError as exc:
        raise ReferenceError(_pydantic_reason(exc)) from None


def to_csv(ref: ReferenceSet) -> str:
    """The set's rows as CSV (the import format), for export and round trips."""
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
    w.writeheader()
    for r in ref.rows:
        point = r.value_low is not None and r.value_low == r.value_high
        w.writerow(
            csvsafe.row(
                {
                    "setting": r.setting,
                    "family": r.family,
                    "metric": r.metric,
                    "direction": r.direction,
                    "resolution": f"{r.resolution:g}",
                    "function": r.cell.function,
                    "shift": r.cell.shift,
                    "alpha": "" if r.cell.alpha is None else f"{r.cell.alpha:g}",
                    "value": "failed" if r.failed else (f"{r.value_low:g}" if point else ""),
                    "value_low": "" if point or r.value_low is None else f"{r.value_low:g}",
                    "value_high": "" if point or r.value_high is None else f"{r.value_high:g}",
                    "failed": "true" if r.failed else "false",
                    "note": r.note,
                }
            )
        )
    return out.getvalue()


__all__ = [
    "CSV_COLUMNS",
    "Cell",
    "ReferenceError",
    "ReferenceRow",
    "ReferenceSet",
    "build_set",
    "cell_key",
    "from_csv",
    "norm_cell_key",
    "to_csv",
]
