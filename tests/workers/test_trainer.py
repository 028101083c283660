"""train_trial: one-epoch runs, determinism, divergence, pruning, diagnostics, the recipe."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
import torch

from normfree.specs import NormSpec, TrialConfig
from normfree.workers import diagnostics
from normfree.workers.proxies import PROXIES
from normfree.workers.trainer import (
    build_model,
    lr_at,
    param_groups,
    parse_norm,
    resolve,
    train_trial,
)

DERF = NormSpec(name="erf", shift="scalar")


def _cfg(proxy: str, norm: NormSpec | str = "layernorm", **kw) -> TrialConfig:
    spec = norm if isinstance(norm, NormSpec) else NormSpec(name=norm)
    return TrialConfig(proxy=proxy, norm=spec, **kw)


def _strip_times(result):
    """A result without its wall-clock fields (the only nondeterministic parts)."""
    d = result.model_dump()
    for k in ("train_time_s", "total_time_s"):
        d.pop(k)
    d["metrics"].pop("samples_per_s", None)
    for rec in d["curves"]:
        rec.pop("wall_time_s")
    return d


@pytest.mark.parametrize("proxy", ["vit-tiny", "dit-tiny"])
@pytest.mark.parametrize("norm", ["layernorm", DERF], ids=["layernorm", "derf"])
def test_one_epoch_each_proxy(proxy, norm):
    res = train_trial(_cfg(proxy, norm, epochs=1))
    assert res.status == "complete", res.error
    assert len(res.curves) == 1 and res.curves[0].epoch == 1
    assert res.objective == PROXIES[proxy].objective
    assert res.value is not None and math.isfinite(res.value)
    assert res.eval_train_loss is not None and math.isfinite(res.eval_train_loss)
    assert "test_loss" in res.metrics
    # diagnostics: one record per slot (2 per block + final) at init and after the epoch
    depth = PROXIES[proxy].config.depth
    assert len(res.diagnostics) == 2 * (2 * depth + 1)
    assert {d.epoch for d in res.diagnostics} == {0, 1}
    assert res.config["norm"]["name"] in ("layernorm", "erf")


def test_deterministic_for_a_seed_and_seed_matters():
    a = train_trial(_cfg("vit-tiny", DERF, seed=3))
    b = train_trial(_cfg("vit-tiny", DERF, seed=3))
    c = train_trial(_cfg("vit-tiny", DERF, seed=4))
    assert _strip_times(a) == _strip_times(b)
    assert a.curves[-1].train_loss != c.curves[-1].train_loss


def test_trial_leaves_global_state_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state().clone()
    threads = torch.get_num_threads()
    train_trial(_cfg("vit-tiny", epochs=1))
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.get_num_threads() == threads


def test_divergence_is_a_result_with_its_step():
    res = train_trial(_cfg("vit-tiny", "identity", lr=50.0, overrides={"max_train": 256}))
    assert res.status == "diverged"
    assert isinstance(res.diverged_at_step, int) and res.diverged_at_step >= 1
    assert res.metrics == {} and res.value is None
    assert len(res.curves) < PROXIES["vit-tiny"].epochs or res.diverged_at_step is not None


def test_report_true_prunes():
    seen = []
    res = train_trial(_cfg("vit-tiny"), report=lambda rec: seen.append(rec) or True)
    assert res.status == "pruned"
    assert len(seen) == 1 and len(res.curves) == 1
    assert "val_acc" in res.metrics


def test_dit_zero_init_final_follows_norm_kind_unless_set():
    assert resolve(_cfg("dit-tiny", "layernorm")).model_config.zero_init_final is True
    assert resolve(_cfg("dit-tiny", DERF)).model_config.zero_init_final is False
    forced = resolve(_cfg("dit-tiny", DERF, overrides={"zero_init_final": True}))
    assert forced.model_config.zero_init_final is True
    # DiT's norms carry no affine: adaLN modulates instead
    model = build_model(resolve(_cfg("dit-tiny", DERF)))
    assert getattr(model.blocks[0].norm1, "gamma", None) is None


def test_invalid_configs_raise_before_work():
    with pytest.raises(ValueError, match="unknown proxy"):
        resolve(_cfg("no-such-proxy"))
    with pytest.raises(ValueError, match="unknown override"):
        resolve(_cfg("vit-tiny", overrides={"dept": 3}))
    with pytest.raises(ValueError, match="integer"):
        resolve(_cfg("vit-tiny", overrides={"depth": 2.5}))


def test_aliases():
    assert parse_norm("derf") == NormSpec(name="erf", shift="scalar")
    assert parse_norm("dyt") == NormSpec(name="tanh", shift="none")
    assert parse_norm("derf", shift="channel").shift == "channel"
    assert parse_norm("erf") == NormSpec(name="erf")


def test_weight_decay_groups_exclude_norm_params_and_1d():
    model = build_model(resolve(_cfg("vit-tiny", DERF)))
    decay, no_decay, norms, scalars = param_groups(model, 0.05, scalar_lr_mult=3.0)
    decayed = {id(p) for p in decay["params"]}
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if leaf in ("alpha", "s", "gamma", "beta") or p.ndim < 2:
            assert id(p) not in decayed, name
    assert id(model.blocks[0].attn.qkv.weight) in decayed
    assert no_decay["weight_decay"] == norms["weight_decay"] == scalars["weight_decay"] == 0.0
    # alpha and s get their own learning-rate multiplier; gamma/beta the norms' (here 1)
    assert {id(p) for p in scalars["params"]} == {
        id(p) for n, p in model.named_parameters() if n.rsplit(".", 1)[-1] in ("alpha", "s")
    }
    assert (scalars["lr_mult"], norms["lr_mult"], decay["lr_mult"]) == (3.0, 1.0, 1.0)


def test_fixed_and_log_alpha():
    """learn_alpha=False freezes alpha at alpha0 (the DyT "without alpha" ablation); a preset's
    alpha_param="log" trains log(alpha) instead, and alpha never changes sign."""
    fixed = train_trial(_cfg("vit-tiny", NormSpec(name="tanh", alpha0=1.0, learn_alpha=False)))
    assert fixed.status == "complete"
    assert {d.alpha for d in fixed.diagnostics if d.alpha is not None} == {1.0}
    learned = train_trial(_cfg("vit-tiny", NormSpec(name="tanh")))
    assert len({d.alpha for d in learned.diagnostics if d.alpha is not None}) > 1
    res = resolve(_cfg("vit-tiny", DERF))
    log = replace(res, preset=replace(res.preset, alpha_param="log"))
    model = build_model(log)
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_parameters()}
    assert "log_alpha" in names and "alpha" not in names
    assert float(model.norm_final.alpha) == pytest.approx(0.5)


def test_lr_schedule_warmup_then_cosine():
    lrs = [lr_at(s, 100, 10, 1.0, "cosine") for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert lrs[10] == pytest.approx(1.0) and lrs[-1] < 0.01
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(lrs[10:]))
    assert lr_at(50, 100, 0, 2.0, "constant") == 2.0


def test_diagnostics_values_match_the_modules():
    res = resolve(_cfg("vit-tiny", DERF))
    torch.manual_seed(0)
    model = build_model(res)
    with torch.no_grad():
        model.blocks[1].norm2.alpha.fill_(0.7)
        model.blocks[1].norm2.s.fill_(-0.25)
    x = torch.randn(16, 1, 8, 8)
    recs = diagnostics.measure(model, lambda m: m(x).square().mean(), epoch=5)
    by = {r.layer: r for r in recs}
    assert list(by) == [
        "blocks.0.norm1",
        "blocks.0.norm2",
        "blocks.1.norm1",
        "blocks.1.norm2",
        "norm_final",
    ]
    r = by["blocks.1.norm2"]
    assert r.epoch == 5
    assert r.alpha == pytest.approx(0.7) and r.s_mean == pytest.approx(-0.25)
    assert r.gamma_mean == pytest.approx(1.0) and r.beta_mean == pytest.approx(0.0)
    assert r.input_std > 0 and r.input_absmax >= r.input_std
    assert r.branch_norm > 0 and r.grad_norm > 0 and r.extra["param_grad_norm"] > 0
    assert by["norm_final"].branch_norm is None
    # the probe leaves no gradients behind for the optimiser
    assert all(p.grad is None for p in model.parameters())


def test_dit_sample_quality_metric():
    res = train_trial(_cfg("dit-tiny", epochs=1, overrides={"fd_samples": 60}))
    assert res.status == "complete", res.error
    assert math.isfinite(res.metrics["fd_digits_clf"]) and res.metrics["fd_digits_clf"] > 0


def test_bf16_precision_option_trains():
    res = train_trial(_cfg("vit-tiny", "layernorm", epochs=1, overrides={"precision": "bf16"}))
    assert res.status == "complete", res.error
    assert res.config["precision"] == "bf16"


def test_dit_intermediate_validation_is_one_draw_and_the_objective_all_draws(monkeypatch):
    """Epochs before the last use one fixed draw per image; the last (the objective) uses all."""
    from normfree.workers.trainer import TASKS, DiffusionTask

    res = resolve(_cfg("dit-tiny", DERF))
    torch.manual_seed(0)
    model = build_model(res).eval()
    task = TASKS["diffusion"](res)
    n = len(task.y_val)
    cheap, full = task.evaluate(model, last=False), task.evaluate(model, last=True)
    xr, yr, t, noise = task._fixed_draws("val", task.x_val, task.y_val, task.VAL_REPEATS)
    assert len(yr) == task.VAL_REPEATS * n and torch.equal(xr[:n], task.x_val)
    with torch.no_grad():
        first = float(task.diff.loss(model, xr[:n], yr[:n], t[:n], noise[:n]))
        every = float(task.diff.loss(model, xr, yr, t, noise))
    assert cheap["val_loss"] == pytest.approx(first, rel=1e-5)
    assert full["val_loss"] == pytest.approx(every, rel=1e-5)
    assert cheap["val_loss"] != full["val_loss"]  # different draws: different estimates
    # in a trial: only the last epoch asks for the full estimate, and that is the objective
    asked: list[tuple[bool, float]] = []

    class Recording(DiffusionTask):  # the real task; it only records what the trainer asks
        def evaluate(self, model, last=True):
            out = super().evaluate(model, last=last)
            asked.append((last, out["val_loss"]))
            return out

    monkeypatch.setitem(TASKS, "diffusion", Recording)
    out = train_trial(_cfg("dit-tiny", DERF, epochs=3))
    assert out.status == "complete", out.error
    assert [last for last, _ in asked] == [False, False, True]
    assert out.value == asked[-1][1] == out.curves[-1].val_loss == out.metrics["val_loss"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="asks for CUDA through the settings")
def test_train_trial_reads_no_settings_and_leaves_the_rng(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a trial runs is an argument: settings that ask for CUDA do not reach it."""
    from normfree.settings import get_settings

    monkeypatch.setenv("NORMFREE_TRIAL_DEVICE", "cuda")
    get_settings.cache_clear()
    try:
        state = torch.get_rng_state()
        res = train_trial(_cfg("vit-tiny", "layernorm", epochs=1))
        assert res.status == "complete", res.error
        assert torch.equal(torch.get_rng_state(), state)
    finally:
        get_settings.cache_clear()


def test_train_trial_puts_kernels_where_it_is_told(monkeypatch, tmp_path) -> None:
    """The kernel cache and CPU backend arrive as KernelOptions: a cache set in the environment
    does not reach the trial, the one handed to it does."""
    from normfree.kernels import KernelOptions
    from normfree.settings import get_settings

    monkeypatch.setenv("NORMFREE_KERNEL_CACHE", str(tmp_path / "from-env"))
    monkeypatch.setenv("NORMFREE_KERNEL_CPU_BACKEND", "compile")
    get_settings.cache_clear()
    try:
        given = KernelOptions(cache=tmp_path / "given")
        norm = NormSpec(name="u/(2 + abs(u)) + 0.01*u")  # a formula no other test compiles
        res = train_trial(_cfg("vit-tiny", norm, epochs=1, overrides={"max_train": 128}),
                          kernels=given)  # fmt: skip
        assert res.status == "complete", res.error
    finally:
        get_settings.cache_clear()
    assert list(given.cache.glob("native_*.so")) and not (tmp_path / "from-env").exists()


def test_heldout_objective_ranks_the_same_run_on_both_held_out_splits(monkeypatch):
    """A ``heldout_*`` preset trains exactly as its source (same metrics, seed for seed) and is
    ranked by the count-weighted pool of the validation and test splits, at every epoch; this
    identity is what lets bench/calibration.py rescore vit-screen's runs as vit-screen-heldout's."""
    from normfree.workers.trainer import pooled_heldout

    heldout = replace(PROXIES["vit-tiny"], name="vit-tiny-heldout", objective="heldout_acc")
    monkeypatch.setitem(PROXIES, heldout.name, heldout)
    plain = train_trial(_cfg("vit-tiny", epochs=2, seed=3))
    pooled = train_trial(_cfg("vit-tiny-heldout", epochs=2, seed=3))
    assert plain.status == pooled.status == "complete"
    for k in ("val_acc", "val_loss", "test_acc", "test_loss", "train_loss"):
        assert pooled.metrics[k] == plain.metrics[k], k
    assert "heldout_acc" not in plain.metrics  # other presets never score the test split mid-run
    assert all("heldout_acc" in rec.metrics for rec in pooled.curves)  # the pruner's value
    n_val, n_test = heldout.max_eval, heldout.max_eval
    want = pooled_heldout(
        (plain.metrics["val_loss"], plain.metrics["val_acc"], n_val),
        (plain.metrics["test_loss"], plain.metrics["test_acc"], n_test),
    )
    assert pooled.objective == "heldout_acc"
    assert pooled.value == pytest.approx(want["heldout_acc"], abs=1e-12)
    assert pooled.metrics["heldout_loss"] == pytest.approx(want["heldout_loss"], abs=1e-12)


def test_pooled_heldout_weights_each_split_by_its_size():
    from normfree.workers.trainer import pooled_heldout

    out = pooled_heldout((1.0, 0.5, 100), (4.0, 1.0, 300))
    assert out == {"heldout_loss": pytest.approx(3.25), "heldout_acc": pytest.approx(0.875)}


def test_a_loss_screen_rescores_its_source_and_others_do_not():
    """vit-screen-loss trains exactly as vit-screen (only the objective and its direction
    differ), so recorded runs rescore; a preset that trains differently is refused."""
    from normfree.workers.rescore import check_rescorable, rescored_metrics

    assert PROXIES["vit-screen-loss"].direction == "minimize"
    sizes = check_rescorable("vit-screen", "vit-screen-loss")
    assert sizes == (750, 750)
    m = rescored_metrics(
        {"val_loss": 0.4, "val_acc": 0.9, "test_loss": 0.6, "test_acc": 0.8}, sizes
    )
    assert m["heldout_loss"] == pytest.approx(0.5) and m["heldout_acc"] == pytest.approx(0.85)
    with pytest.raises(ValueError, match="does not train exactly"):
        check_rescorable("vit-stress", "vit-screen-loss")


def test_adam_beta2_is_the_presets_and_recorded(monkeypatch):
    fast = replace(PROXIES["vit-tiny"], name="vit-tiny-b2", adam_beta2=0.95)
    monkeypatch.setitem(PROXIES, fast.name, fast)
    a = train_trial(_cfg("vit-tiny-b2", epochs=1))
    b = train_trial(_cfg("vit-tiny", epochs=1))
    assert a.config["adam_beta2"] == 0.95 and b.config["adam_beta2"] == 0.999
    assert a.metrics["train_loss"] != b.metrics["train_loss"]
