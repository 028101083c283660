"""The one error type of the search space: bad user input, with where it went wrong."""

from __future__ import annotations


class ExpressionError(ValueError):
    """A formula (or catalog/transform reference) that normfree refuses, and why.

    ``position`` is the 0-based character offset into the submitted text where the problem was
    found, or ``None`` when the reason is about the whole function (for example "NaN at u=-1").
    ``str(err)`` carries both, so a CLI or API can print it as is.
    """

    def __init__(self, message: str, position: int | None = None) -> None:
        self.message = message
        self.position = position
        where = f" (at position {position})" if position is not None else ""
        super().__init__(f"{message}{where}")

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form for ``--json`` output and API error bodies."""
        return {"error": self.message, "position": self.position}
