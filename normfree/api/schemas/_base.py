"""The base classes every API model derives from, and the name pattern they share."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

# Anchored at both ends (pydantic's regex engine has no "before a final newline" $).
NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_\-]{0,63}$"


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


def unreadable_field(shown_as: Literal["empty", "as null"]) -> Any:
    """The ``unreadable`` field of a model built from stored rows: the fields a corrupt row
    could not give, shown ``empty`` (lists, texts) or ``as null`` (numbers), never a 500."""
    return Field(
        default_factory=list,
        description=f"Stored fields that could not be read (corrupt rows): shown {shown_as}.",
    )


def _nullable(annotation: Any) -> tuple[Any, bool]:
    """A number as the API shows it (``jsonsafe.finite``: a non-finite value is null), and
    whether it changed: ``float`` may be null, so may a float in a ``dict[str, float]``."""
    if annotation is float:
        return float | None, True
    if annotation == dict[str, float]:
        return dict[str, float | None], True
    return annotation, False


def public_copy(spec: type[BaseModel], name: str, doc: str) -> type[_Out]:
    """The API's model ``name`` of the record ``spec``: its fields, in its order, with its
    defaults and descriptions, each float nullable and optional (a stored row holds null for
    a value that was not finite); the one place a field of the record is declared."""
    fields: dict[str, Any] = {}
    for key, field in spec.model_fields.items():
        annotation, changed = _nullable(field.annotation)
        default = field.default if not (changed and field.is_required()) else None
        if field.default_factory is not None:
            info = Field(default_factory=field.default_factory, description=field.description)
        else:
            info = Field(default=default, description=field.description)
        fields[key] = (annotation, info)
    return create_model(name, __base__=_Out, __doc__=doc, **fields)
