"""How pages write numbers and property badges: Python functions the templates call.

Why not Jinja macros: a 171-arm board page calls ``fmt`` five times and ``badges`` once per
row, and a macro call costs Jinja a context, a frame and an output buffer; under a writer the
board page is rebuilt at every commit (issue 27), and those calls were 40% of its rendering on
a 2-core host (bench/results/live_reads.md). The functions return ``Markup`` (safe HTML), with
every text from the data escaped.
"""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from normfree.api import services

_DASH = Markup('<span class="muted">\u2013</span>')


def fmt(x: Any, digits: int = 4) -> Markup | str:
    """``x`` to ``digits`` significant digits; a muted dash for a missing value."""
    if x is None:
        return _DASH
    return f"{x:.{digits}g}"


# Properties shown as badges, in this order, when the candidate has them (flattened names).
_BADGE_ORDER = ("zero_centred", "odd", "bounded", "monotone", "smooth", "differentiable")


def property_badges(props: dict[str, Any] | None) -> list[dict[str, str]]:
    """Short badges for a candidate's properties: true flags, and the growth/monotone kind."""
    flat = services.property_flags(props)
    out: list[dict[str, str]] = []
    seen: set[str] = set()

    def short(key: str) -> str:
        return key.rsplit(".", 1)[-1]

    keys = sorted(
        flat,
        key=lambda k: (
            _BADGE_ORDER.index(short(k)) if short(k) in _BADGE_ORDER else len(_BADGE_ORDER),
            k,
        ),
    )
    for key in keys:
        value = flat[key]
        label = short(key).replace("_", " ")
        if label in seen:
            continue
        if value is True:
            out.append({"label": label, "cls": "", "title": f"{key} = true"})
            seen.add(label)
        elif isinstance(value, str) and value and short(key) in ("monotone", "growth", "kind"):
            out.append({"label": f"{label}: {value}", "cls": "no", "title": key})
            seen.add(label)
        if len(out) >= 6:
            break
    return out


def badges(props: dict[str, Any] | None) -> Markup:
    """The badges of :func:`property_badges` as HTML."""
    one = Markup('<span class="badge {}" title="{}">{}</span>')
    return Markup("").join(
        one.format(b["cls"], b["title"], b["label"]) for b in property_badges(props)
    )


def install(env: Any) -> None:
    """Make ``fmt`` and ``badges`` callable from every template (and the badge list a filter)."""
    env.globals["fmt"] = fmt
    env.globals["badges"] = badges
    env.filters["property_badges"] = property_badges


__all__ = ["badges", "fmt", "install", "property_badges"]
