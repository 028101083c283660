"""One CSV cell rule for every writer: a cell a spreadsheet would run as a formula is text.

A spreadsheet opening our CSV treats a cell that begins with ``=``, ``+``, ``-`` or ``@`` (and,
in some, a tab or carriage return) as a formula: ``=HYPERLINK(...)`` in a reference set's note
would run on the machine of whoever opens the export. :func:`cell` prefixes such a cell with a
single quote, which spreadsheets show as text; a number (``-0.5``, ``+1e3``) stays as it is, since
the import format has signed numbers and a number runs nothing. :func:`uncell` undoes the prefix,
so an export read back by our own import gives the same text.
"""

from __future__ import annotations

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def cell(value: object) -> str:
    """``value`` as a CSV cell a spreadsheet shows as text (see the module docstring)."""
    text = "" if value is None else str(value)
    if text.startswith(FORMULA_STARTS) and not _is_number(text):
        return "'" + text
    return text


def uncell(text: str) -> str:
    """A cell written by :func:`cell` back to its text (other text unchanged)."""
    if text.startswith("'") and text[1:].startswith(FORMULA_STARTS) and not _is_number(text[1:]):
        return text[1:]
    return text


def row(values: dict[str, object]) -> dict[str, str]:
    """Every cell of a ``csv.DictWriter`` row through :func:`cell`."""
    return {k: cell(v) for k, v in values.items()}


__all__ = ["FORMULA_STARTS", "cell", "row", "uncell"]
