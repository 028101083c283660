"""Zero-cost prescreen: deterministic, per-layer signal, high-lr survival."""

from __future__ import annotations

from dataclasses import replace

import pytest

from normfree.specs import NormSpec
from normfree.workers.prescreen import prescreen
from normfree.workers.proxies import PROXIES, PrescreenOptions


def _stable(out: dict) -> dict:
    return {k: v for k, v in out.items() if k != "seconds"}


def test_prescreen_is_deterministic_and_reports_every_slot():
    a = prescreen("derf", proxy="vit-tiny", seed=1)
    b = prescreen(NormSpec(name="erf", shift="scalar"), proxy="vit-tiny", seed=1)
    assert _stable(a) == _stable(b)
    assert isinstance(a["survives"], bool) and a["ok"] == a["survives"]
    assert [d["layer"] for d in a["layers"]] == [
        "blocks.0.norm1",
        "blocks.0.norm2",
        "blocks.1.norm1",
        "blocks.1.norm2",
        "norm_final",
    ]
    assert all(d["input_std"] > 0 for d in a["layers"])
    assert a["steps"] == PROXIES["vit-tiny"].prescreen.steps and a["std_growth"] > 0


def test_prescreen_flags_an_operator_that_cannot_survive(monkeypatch: pytest.MonkeyPatch):
    # no normalization at all, at a learning rate no network survives (the preset's own options)
    tiny = PROXIES["vit-tiny"]
    monkeypatch.setitem(
        PROXIES, "vit-tiny", replace(tiny, prescreen=PrescreenOptions(lr_mult=5000.0))
    )
    out = prescreen("identity", proxy="vit-tiny", seed=0)
    assert out["survives"] is False and out["ok"] is False


def test_prescreen_on_dit():
    out = prescreen("layernorm", proxy="dit-tiny", seed=0)
    assert out["ok"] and out["survives"] is True


def test_a_parsed_candidate_travels_into_the_model():
    """The API hands its parsed Candidate over: the model's norms use that very object, and the
    verdict is the one a re-parse would give."""
    from dataclasses import replace

    from normfree.search_space import parse
    from normfree.specs import TrialConfig
    from normfree.workers.trainer import build_model, resolve

    norm = NormSpec(name="halfsquash", formula="u/(1+abs(u))")
    cand = parse(norm.formula, name=norm.name)
    res = replace(resolve(TrialConfig(proxy="vit-tiny", norm=norm)), candidate=cand)
    slots = [m for m in build_model(res).modules() if hasattr(m, "candidate")]
    assert slots and all(m.candidate is cand for m in slots)
    assert _stable(prescreen(norm, "vit-tiny", candidate=cand)) == _stable(
        prescreen(norm, "vit-tiny")
    )
