"""Stress presets (issue 9): the identity norm is flagged, the diagnostics say why, the
prescreen predicts it, deterministically. Short runs on one thread (~20 s in all)."""

from __future__ import annotations

import math
import random
import statistics

import pytest
import torch
from torch import nn

from normfree.specs import NormSpec, TrialConfig
from normfree.workers import diagnostics
from normfree.workers.prescreen import prescreen
from normfree.workers.proxies import PROXIES
from normfree.workers.trainer import train_trial


@pytest.fixture(autouse=True)
def _one_thread():
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


def test_stress_presets_are_registered_and_aggressive():
    for name, base in (("vit-stress", "vit-digits"), ("dit-stress", "dit-digits")):
        p, b = PROXIES[name], PROXIES[base]
        assert p.task == b.task and p.objective == b.objective
        assert p.lr > b.lr and p.warmup_epochs <= 0.5
        assert p.prescreen.lr_mult == 1.0
    # reduced precision is vit-stress's axis; dit-stress stays fp32 (bf16 is slow on AVX2 CPUs)
    assert PROXIES["vit-stress"].precision == "bf16"
    # a diffusion loss starts near the zero-noise predictor's: twice that is a destroyed model
    assert PROXIES["dit-stress"].divergence_factor == 2.0


def test_identity_diverges_on_a_short_stress_run_and_the_diagnostics_say_why():
    # the preset's own schedule: with epochs=2 the cosine decay lowers the lr enough by step ~40
    # that the identity sometimes survives (it diverges at steps 36-47 on the 8-epoch schedule)
    r = train_trial(TrialConfig(proxy="vit-stress", norm=NormSpec(name="identity")))
    assert r.status == "diverged" and r.diverged_at_step is not None
    # the loss spiked no later than the divergence check fired
    assert r.spike_step is not None and r.spike_step <= r.diverged_at_step
    # the diverged epoch still has per-slot maxima over its training steps
    last = [d for d in r.diagnostics if d.epoch == max(x.epoch for x in r.diagnostics)]
    assert last and all("train_absmax" in d.extra for d in last)
    stab = diagnostics.stability(r.diagnostics)
    assert set(stab["layers"]) == {d.layer for d in r.diagnostics if d.epoch == 0}
    # no squash: the norm's output is its input, so the two maxima coincide
    for slot in stab["layers"].values():
        assert slot["train_out_absmax"] == pytest.approx(slot["train_absmax"])


def test_new_diagnostics_fields_are_present_and_sane_for_layernorm():
    r = train_trial(TrialConfig(proxy="vit-stress", norm=NormSpec(name="layernorm"), epochs=1))
    assert r.status == "complete"
    ep1 = [d for d in r.diagnostics if d.epoch == 1]
    assert len(ep1) == 2 * PROXIES["vit-stress"].config.depth + 1  # every slot
    dim = PROXIES["vit-stress"].config.dim
    for d in ep1:
        ex = d.extra
        assert all(math.isfinite(ex[k]) and ex[k] > 0 for k in diagnostics.MONITOR_KEYS)
        assert ex["train_absmax"] >= ex["train_std_max"]  # a max magnitude bounds the std
        assert "train_nonfinite" not in ex
        # LayerNorm's output is bounded by sqrt(D) * max|gamma| + max|beta| (gamma ~ 1 here)
        assert ex["train_out_absmax"] < 2 * math.sqrt(dim) + 1
    stab = diagnostics.stability(r.diagnostics)
    assert stab["max_train_absmax"] == max(d.extra["train_absmax"] for d in ep1)


def test_prescreen_predicts_the_identity_unstable_deterministically():
    a = prescreen("identity", proxy="vit-stress", seed=0)
    b = prescreen("identity", proxy="vit-stress", seed=0)
    drop = {"seconds"}
    assert {k: v for k, v in a.items() if k not in drop} == {
        k: v for k, v in b.items() if k not in drop
    }
    assert a["unstable"] is True and a["out_growth"] > 20
    ln = prescreen("layernorm", proxy="vit-stress", seed=0)
    assert ln["unstable"] is False and ln["out_growth"] < 5
    assert ln["steps"] == PROXIES["vit-stress"].prescreen.steps


def test_first_spike():
    assert diagnostics.first_spike([2.3] * 30) is None
    flat = [2.3 - 0.01 * i for i in range(30)]
    assert diagnostics.first_spike([*flat, 9.0, 1.0]) == 31
    assert diagnostics.first_spike([2.3, 2.2, math.nan]) == 3  # non-finite is always a spike
    assert diagnostics.first_spike([2.3, 9.0, 2.0]) is None  # the initial descent is not one
    # a smooth (classification-like) loss keeps the 2x rule: 2.1x the recent median is a spike
    assert diagnostics.first_spike([*([0.5] * 40), 1.05]) == 41
    assert diagnostics.first_spike([*([0.5] * 40), 0.95]) is None


def _diffusion_loss(steps: int, seed: int) -> list[float]:
    """A diffusion-like per-step loss: a decaying level times the mean over a batch of 32
    sampled timesteps of a per-timestep cost that is largest at the lowest t (a batch that draws
    a few of them costs 2-3x the median), as in the proxies' DDPM loss."""
    rng = random.Random(seed)
    out = []
    for i in range(steps):
        level = 0.1 * (1 + 4 * 0.97**i)
        cost = statistics.fmean(1 + 20 * 0.5 ** rng.randrange(100) for _ in range(32))
        out.append(level * cost * math.exp(0.1 * rng.gauss(0, 1)))
    return out


def test_first_spike_ignores_a_diffusion_loss_noise_but_not_a_blowup():
    ratio = diagnostics.SPIKE_RATIOS["diffusion"]
    for seed in range(10):
        noisy = _diffusion_loss(400, seed)
        assert diagnostics.first_spike(noisy, ratio=ratio) is None
    # the classification ratio (2x) fires on this noise, as the old rule did on dit-stress
    assert sum(diagnostics.first_spike(_diffusion_loss(400, s)) is not None for s in range(10)) > 5
    noisy = _diffusion_loss(400, 0)
    # a genuine blow-up (10x the level) is still a spike, at its step
    assert diagnostics.first_spike([*noisy[:300], 1.0, *noisy[300:]], ratio=ratio) == 301
    # an earlier outlier inside the window neither hides the next spike nor is needed for it
    twice = [*noisy[:200], 1.0, *noisy[200:210], 1.0]
    assert diagnostics.first_spike(twice, ratio=ratio) == 201
    assert diagnostics.first_spike(twice, ratio=ratio, warmup=202) == 212


class _Toy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1 = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm1(x)


def test_monitor_counts_only_enabled_steps_and_caps_overflow():
    m = _Toy()
    mon = diagnostics.ActivationMonitor(m)
    m(torch.full((4,), 100.0))  # disabled: not counted
    mon.enabled = True
    m(torch.tensor([1.0, -3.0]))
    assert mon.take() == {
        "norm1": {
            "train_absmax": 3.0,
            "train_std_max": pytest.approx(2.828427, rel=1e-5),
            "train_out_absmax": 3.0,
        }
    }
    m(torch.tensor([1.0, math.inf]))
    got = mon.take()["norm1"]
    assert got["train_absmax"] == diagnostics.OVERFLOW and got["train_nonfinite"] == 1.0
    mon.close()
    m(torch.tensor([5.0]))
    assert mon.take() == {}
