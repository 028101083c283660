"""The proxies: shapes, explicit norm slots, init options, and a sweep of the registry."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from normfree.specs import NormSpec, TrialConfig
from normfree.workers.proxies import PROXIES, DiT, DiTConfig, ViT, ViTConfig
from normfree.workers.proxies.dit import Diffusion
from normfree.workers.trainer import build_model, resolve


def _ln(dim: int) -> nn.Module:
    return nn.LayerNorm(dim)


def _slots(model: nn.Module) -> list[str]:
    return [n for n, m in model.named_modules() if n.rsplit(".", 1)[-1].startswith("norm")]


def test_vit_shapes_and_norm_slots():
    made = []
    model = ViT(ViTConfig(depth=3), lambda d: made.append(d) or nn.LayerNorm(d))
    assert made == [64] * 7  # 2 per block + the final norm, all built by norm_layer
    assert model(torch.randn(5, 1, 8, 8)).shape == (5, 10)
    assert _slots(model)[-1] == "norm_final" and len(_slots(model)) == 7
    # 1-D sequences (MNIST-1D): height 1, width 40, patches of 1 x 4
    seq = ViT(ViTConfig(img_size=1, img_width=40, patch=4), _ln)
    assert seq(torch.randn(2, 1, 1, 40)).shape == (2, 10)


def test_vit_final_norm_is_applied_after_pooling():
    seen = []
    model = ViT(ViTConfig(depth=1), _ln)
    model.norm_final.register_forward_hook(lambda m, i, o: seen.append(i[0].shape))
    model(torch.randn(3, 1, 8, 8))
    assert seen == [torch.Size([3, 64])]  # (B, D): pooled, not (B, N, D)


def test_vit_init_options():
    torch.manual_seed(0)
    plain = ViT(ViTConfig(depth=8, dim=128, heads=4), _ln)
    scaled = ViT(ViTConfig(depth=8, dim=128, heads=4, depth_scaled_init=True), _ln)
    assert plain.blocks[0].attn.qkv.bias is not None  # qkv bias on
    assert plain.blocks[0].mlp.fc2.weight.std().item() == pytest.approx(0.02, rel=0.1)
    want = 0.02 / math.sqrt(16)
    assert scaled.blocks[0].mlp.fc2.weight.std().item() == pytest.approx(want, rel=0.1)
    assert scaled.blocks[0].attn.proj.weight.std().item() == pytest.approx(want, rel=0.1)
    assert scaled.blocks[0].attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.1)
    ls = ViT(ViTConfig(layerscale_init=1e-4), _ln)
    assert torch.all(ls.blocks[0].ls1.gamma == 1e-4) and isinstance(
        plain.blocks[0].ls1, nn.Identity
    )
    gain = ViT(ViTConfig(dim=128, heads=4, init_fan_in_ref=768, init_scope="patch"), _ln)
    w = gain.patch_embed.weight
    assert w.std().item() == pytest.approx(0.02 * math.sqrt(768 / 4), rel=0.15)
    assert gain.blocks[0].attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.1)


def test_dit_shapes_and_adaln_zero():
    cfg = DiTConfig(zero_init_final=True)
    model = DiT(cfg, lambda d: nn.LayerNorm(d, elementwise_affine=False))
    x, t, y = torch.randn(4, 1, 8, 8), torch.tensor([0, 5, 50, 99]), torch.tensor([1, 2, 3, 4])
    out = model(x, t, y)
    assert out.shape == x.shape
    assert torch.all(out == 0)  # adaLN-Zero + zero final layer: predicts eps = 0 at init
    free = DiT(
        DiTConfig(zero_init_final=False), lambda d: nn.LayerNorm(d, elementwise_affine=False)
    )
    assert free(x, t, y).abs().sum() > 0
    with pytest.raises(ValueError, match="unresolved"):
        DiT(DiTConfig(), _ln)


def test_diffusion_schedule_and_deterministic_sampler():
    diff = Diffusion(100)
    assert (
        diff.alpha_bar[0] > 0.99 and diff.alpha_bar[-1] < 0.01
    )  # short chain, still ends in noise
    model = DiT(DiTConfig(depth=1, zero_init_final=False), lambda d: nn.LayerNorm(d, False))
    y = torch.arange(6) % 10
    a = diff.sample(model, y, (1, 8, 8), steps=5, seed=1)
    b = diff.sample(model, y, (1, 8, 8), steps=5, seed=1)
    assert torch.equal(a, b) and a.shape == (6, 1, 8, 8) and a.abs().max() <= 1


@pytest.mark.parametrize("name", sorted(PROXIES))
def test_every_preset_builds_and_runs_a_batch(name):
    preset = PROXIES[name]
    assert preset.objective and preset.direction in ("maximize", "minimize")
    res = resolve(TrialConfig(proxy=name, norm=NormSpec(name="layernorm")))
    model = build_model(res)
    c, h, w = res.data.image_shape
    x = torch.randn(2, c, h, w)
    if preset.task == "classify":
        assert model(x).shape == (2, res.data.num_classes)
    else:
        assert model(x, torch.tensor([1, 2]), torch.tensor([0, 1])).shape == x.shape


def test_frechet_distance_and_the_digits_feature_space():
    import numpy as np

    from normfree.workers.data import get_dataset
    from normfree.workers.proxies.feature_clf import fd_score, frechet_distance

    rng = np.random.default_rng(0)
    a = rng.normal(size=(2000, 4))
    assert frechet_distance(a, a) == pytest.approx(0.0, abs=1e-6)
    # shifting the mean by 1 in each of 4 dims adds 4
    assert frechet_distance(a, a + 1.0) == pytest.approx(4.0, rel=1e-6)
    real = torch.from_numpy(get_dataset("digits").x_val)
    noise = torch.rand_like(real)
    assert fd_score("digits", real) < fd_score("digits", noise) / 5
