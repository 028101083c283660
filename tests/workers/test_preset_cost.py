"""A preset is one object: its cost per epoch, prescreen options and description are its own
typed fields, and the cost gate reads them (a new preset is costed from its own record)."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import pytest

from normfree.specs import NormSpec, TrialConfig
from normfree.workers import cost
from normfree.workers.proxies import PROXIES, EpochCost, PrescreenOptions, Preset, register


def _seconds(proxy: str, **overrides: object) -> float:
    config = TrialConfig(proxy=proxy, norm=NormSpec(name="erf"), seed=0, overrides=overrides)
    return cost.trial_seconds(config)


def test_every_preset_states_its_cost_prescreen_and_description() -> None:
    for preset in PROXIES.values():
        assert preset.epoch_cost.seconds > 0 and preset.epoch_cost.config is not None
        assert isinstance(preset.prescreen, PrescreenOptions)
        assert preset.description.strip()
        assert "extra" not in {f.name for f in dataclasses.fields(Preset)}


def test_the_gate_reads_the_preset_not_a_table_of_names(monkeypatch: pytest.MonkeyPatch) -> None:
    screen = PROXIES["vit-screen"]
    base = _seconds("vit-screen")
    assert base == pytest.approx(screen.epochs * screen.epoch_cost.seconds)
    # a deeper variant keeps the measured (depth-6) config: it costs by FLOPs, more, not less
    deeper = replace(screen, name="vit-screen-d8", config=replace(screen.config, depth=8))
    monkeypatch.setitem(PROXIES, deeper.name, deeper)
    assert deeper.epoch_cost.config.depth == 6
    assert _seconds(deeper.name) == pytest.approx(base * 8 / 6)
    # a variant with its own measurement is costed by it
    timed = replace(screen, name="vit-screen-timed", epoch_cost=EpochCost(1.0))
    monkeypatch.setitem(PROXIES, timed.name, timed)
    assert timed.epoch_cost.config is timed.config
    assert _seconds(timed.name) == pytest.approx(screen.epochs * 1.0)


def test_a_model_override_scales_from_the_measured_config() -> None:
    assert _seconds("vit-screen", depth=12) == pytest.approx(2 * _seconds("vit-screen"))


def test_a_preset_without_a_cost_or_a_description_cannot_be_made() -> None:
    tiny = PROXIES["vit-tiny"]
    kwargs = {f.name: getattr(tiny, f.name) for f in dataclasses.fields(Preset)}
    del kwargs["epoch_cost"]
    with pytest.raises(TypeError, match="epoch_cost"):
        Preset(**kwargs)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="description"):
        replace(tiny, name="vit-tiny-x", description=" ")
    with pytest.raises(ValueError, match="positive"):
        EpochCost(0.0)


def test_register_returns_the_preset_it_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("normfree.workers.proxies.PROXIES", dict(PROXIES))
    from normfree.workers import proxies

    made = register(replace(PROXIES["vit-tiny"], name="vit-tiny-2", epoch_cost=EpochCost(0.7)))
    assert proxies.PROXIES["vit-tiny-2"] is made and made.epoch_cost.seconds == 0.7
