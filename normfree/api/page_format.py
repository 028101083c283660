"""How pages write numbers and property badges: Python functions the templates call.

Why not Jinja macros: a 171-arm board page calls ``fmt`` five times and ``badges`` once per
row, and a macro call costs Jinja a context, a frame and an output buffer; under a writer the
board page is rebuilt at every commit (issue 27), and those calls were 40% of its rendering on
a 2-core host (bench/results/live_reads.md). The functions return ``Markup`` (safe HTML), with
every text from the data escaped.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable
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
_BADGE_ORDER = (
    "heavy_tailed_slope", "zero_centred", "odd", "bounded", "monotone", "smooth", "differentiable",
)  # fmt: skip
# Flags whose badge says more than "name = true" when hovered, and stands out ("warn").
_BADGE_NOTES = {
    "heavy_tailed_slope": (
        "|f'| grows at least like |u|^-1/2 at a kink: its gradients have unbounded variance, "
        "and a CPU screen's small batches place it below where scale does "
        "(bench/results/diagnoses-issue25.md, section 2f)"
    ),
}


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
            note = _BADGE_NOTES.get(short(key))
            if note is not None:
                out.append({"label": label, "cls": "warn", "title": note})
            else:
                out.append({"label": label, "cls": "", "title": f"{key} = true"})
            seen.add(label)
        elif isinstance(value, str) and value and short(key) in ("monotone", "growth", "kind"):
            out.append({"label": f"{label}: {value}", "cls": "no", "title": key})
            seen.add(label)
        if len(out) >= 6:
            break
    return out


class _Memo:
    """Rendered HTML by what it shows, least recently used out (shared by a server's threads).

    Why: under a writer the board page is rebuilt at every commit (issue 27, point 1), and one
    commit moves one arm: of 171 rows' HTML, all but a few are the same as at the last build.
    Rendering them again (badges, numbers, escaping) was half of the page's rebuild."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._held: OrderedDict[Hashable, Markup] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Markup | None:
        with self._lock:
            found = self._held.get(key)
            if found is not None:
                self._held.move_to_end(key)
            return found

    def put(self, key: Hashable, value: Markup) -> Markup:
        with self._lock:
            self._held[key] = value
            while len(self._held) > self._size:
                self._held.popitem(last=False)
        return value


_BADGES = _Memo(4096)
_ROWS = _Memo(8192)


def badges(props: dict[str, Any] | None) -> Markup:
    """The badges of :func:`property_badges` as HTML (kept by the properties' text)."""
    key = repr(props)
    found = _BADGES.get(key)
    if found is not None:
        return found
    one = Markup('<span class="badge {}" title="{}">{}</span>')
    return _BADGES.put(
        key,
        Markup("").join(
            one.format(b["cls"], b["title"], b["label"]) for b in property_badges(props)
        ),
    )


def board_rows(rows: Iterable[Any], request: Any) -> Markup:
    """The ranked rows of a leaderboard table (``schemas.LeaderboardRow``) as HTML, each kept
    by everything it shows (its link names the requesting server: ``links.candidate_url``)."""
    from normfree.api.links import candidate_url

    out: list[Markup] = []
    for r in rows:
        if not r.ranked:
            continue
        href = candidate_url(request, r.function or r.candidate)
        failure = r.failure
        vs = r.vs_layernorm
        key = (
            href, r.rank, r.candidate, r.group, repr(r.properties), r.mean, r.ci_high, r.std,
            r.n, r.n_total, r.n_diverged, r.n_failed,
            None if failure is None else (failure.reason, failure.count),
            r.is_best, r.indistinguishable, r.p_vs_best,
            None if not vs else (vs.get("mean_diff"), vs.get("ci_half_width"), vs.get("n_pairs")),
        )  # fmt: skip
        found = _ROWS.get(key)
        out.append(found if found is not None else _ROWS.put(key, _board_row(r, href)))
    return Markup("").join(out)


def _sort_value(x: Any) -> Any:
    return "" if x is None else x


def _board_row(r: Any, href: str) -> Markup:
    """One ranked row of the board table (see ``templates/leaderboard.html``)."""
    mean = fmt(r.mean)
    if r.ci_high is not None and r.mean is not None:
        mean = Markup("{} \u00b1 {}").format(mean, fmt(r.ci_high - r.mean, 2))
    diverged = (
        Markup('<span class="badge bad">{}</span>').format(r.n_diverged) if r.n_diverged else "0"
    )
    if r.failure:
        diverged = Markup('{} <span class="muted failure">{} failed: {} ({})</span>').format(
            diverged, r.n_failed + r.n_diverged, r.failure.reason, r.failure.count
        )
    if r.is_best:
        versus = Markup('<span class="badge good">best</span>')
    elif r.mean is None:
        versus = Markup('<span class="muted">\u2013</span>')
    elif r.indistinguishable:
        versus = Markup('<span class="badge" title="p = {}">\u2248 best</span>').format(r.p_vs_best)
    else:
        versus = Markup('<span class="badge bad" title="p = {}">worse (p={})</span>').format(
            r.p_vs_best, fmt(r.p_vs_best, 2)
        )
    vs = r.vs_layernorm
    paired: Markup | str = ""
    if vs:  # a dict (``storage.leaderboard``'s paired comparison)
        paired = Markup("{}").format(fmt(vs.get("mean_diff"), 3))
        if vs.get("ci_half_width") is not None:
            paired += Markup(" \u00b1 {}").format(fmt(vs["ci_half_width"], 2))
        paired += Markup(' <span class="muted">(n={})</span>').format(vs.get("n_pairs"))
    return Markup(
        "<tr>\n"
        '  <td class="num" data-sort="{rank}">{rank}</td>\n'
        '  <td><a href="{href}">{label}</a></td>\n'
        "  <td>{group}</td>\n"
        "  <td>{badges}</td>\n"
        '  <td class="num" data-sort="{mean_sort}">{mean}</td>\n'
        '  <td class="num" data-sort="{std_sort}">{std}</td>\n'
        '  <td class="num">{n}/{n_total}</td>\n'
        '  <td class="num" data-sort="{n_diverged}">{diverged}</td>\n'
        '  <td data-sort="{p_sort}">{versus}</td>\n'
        '  <td class="num">{paired}</td>\n'
        "</tr>\n"
    ).format(
        rank=r.rank,
        href=href,
        label=r.candidate,
        group=r.group or "",
        badges=badges(r.properties),
        mean_sort=_sort_value(r.mean),
        mean=mean,
        std_sort=_sort_value(r.std),
        std=fmt(r.std, 2),
        n=r.n,
        n_total=r.n_total,
        n_diverged=r.n_diverged,
        diverged=diverged,
        p_sort=_sort_value(r.p_vs_best),
        versus=versus,
        paired=paired,
    )


def install(env: Any) -> None:
    """Make ``fmt``, ``badges`` and ``board_rows`` callable from every template (and the
    badge list a filter)."""
    env.globals["fmt"] = fmt
    env.globals["badges"] = badges
    env.globals["board_rows"] = board_rows
    env.filters["property_badges"] = property_badges


__all__ = ["badges", "board_rows", "fmt", "install", "property_badges"]
