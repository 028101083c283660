"""What the layers above storage may ask of it, as typed protocols.

The API and the workers type their storage handle with these instead of ``Any``, so a new
backend (or a read-only replica) is anything that answers them, and a type checker sees every
call. :class:`normfree.storage.Repository` implements all of them.
"""

from __future__ import annotations

from typing import Any, Protocol


class StudyStore(Protocol):
    """Studies: their rows and their statuses (what the study state machine needs)."""

    def get_study(self, study_id: int) -> dict[str, Any] | None: ...

    def set_study_status(self, study_id: int, status: str) -> None: ...

    def cancel_waiting(self, study_id: int) -> int: ...
