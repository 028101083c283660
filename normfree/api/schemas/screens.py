"""Screen models: place one function among the paper's 16 search candidates."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from normfree.api.schemas._base import _In, _Out

__all__ = ["ScreenCreate", "ScreenOne", "ScreenPublic"]


class ScreenCreate(_In):
    """Place a function among the paper's 16 search candidates (``normfree screen``)."""

    function: str = Field(
        min_length=1,
        max_length=200,
        description="A catalog name, a stored candidate or a formula in u.",
        examples=["u/(1+abs(u)+u*u)"],
    )
    proxies: list[str] = Field(
        default_factory=list,
        max_length=4,
        description="Screens to place it on (default: the default ViT and DiT screens).",
    )
    seeds: int = Field(default=3, ge=2, le=20, description="Paired seeds per arm.")


class ScreenOne(_Out):
    """One screen: its study (created, or found from an earlier request) and the placement."""

    proxy: str
    study_id: int
    found_existing: bool = Field(description="An earlier request made this very screen.")
    status: str
    trials: int
    reused: int = Field(description="Trials answered by earlier runs (not trained again).")
    to_train: int = Field(description="Trials left to train (the function's, mostly).")
    placement: dict[str, Any] | None = Field(
        default=None,
        description="Where the function ranks among the 16 (once nothing is left to train): "
        "rank, the 16 it beats and trails beyond 2 seed stds, the board's rank reliability, "
        "the screen's fidelity headline, caveats, and a sentence (text).",
    )


class ScreenPublic(_Out):
    function: str
    screens: list[ScreenOne]
