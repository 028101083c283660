"""A small pre-norm Vision Transformer whose every norm slot takes the candidate.

Reads top-down: attention, MLP, block, then the model. The model never names a norm class: it
takes ``norm_layer(dim) -> nn.Module`` (LayerNorm, RMSNorm, identity or a pointwise norm from
``normfree.kernels.create_norm``), and keeps every norm as an explicit attribute (``norm1``,
``norm2``, ``norm_final``) so diagnostics and swaps address them by name.

Reference settings (science.md section 6): pre-norm blocks x + attn(norm1(x)), x + mlp(norm2(x));
average pooling with the final norm applied after pooling; qkv bias; trunc-normal(0.02) init; no
LayerScale by default. Options (science.md section 5): LayerScale and depth-scaled residual init.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from normfree.workers.proxies.configs import ViTConfig

NormLayer = Callable[[int], nn.Module]


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, qkv_bias: bool) -> None:
        super().__init__()
        assert dim % heads == 0, "dim must be divisible by heads"
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)  # the branch's last projection

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(x).view(b, n, 3, self.heads, d // self.heads)  # (B, N, 3, nh, hs)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, nh, N, hs)
        y = F.scaled_dot_product_attention(q, k, v)  # (B, nh, N, hs)
        y = y.transpose(1, 2).reshape(b, n, d)  # (B, N, D)
        return self.proj(y)


class Mlp(nn.Module):
    def __init__(self, dim: int, ratio: float) -> None:
        super().__init__()
        hidden = int(dim * ratio)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)  # the branch's last projection

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class LayerScale(nn.Module):
    """diag(lambda) on a residual branch (CaiT); lambda per channel, learnable, init small."""

    def __init__(self, dim: int, init: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class Block(nn.Module):
    """Pre-norm block. ``ls1``/``ls2`` are Identity when LayerScale is off; their outputs are the
    residual branches' outputs (what the diagnostics measure)."""

    def __init__(self, cfg: ViTConfig, norm_layer: NormLayer) -> None:
        super().__init__()
        self.norm1 = norm_layer(cfg.dim)
        self.attn = Attention(cfg.dim, cfg.heads, cfg.qkv_bias)
        self.ls1 = (
            LayerScale(cfg.dim, cfg.layerscale_init) if cfg.layerscale_init else nn.Identity()
        )
        self.norm2 = norm_layer(cfg.dim)
        self.mlp = Mlp(cfg.dim, cfg.mlp_ratio)
        self.ls2 = (
            LayerScale(cfg.dim, cfg.layerscale_init) if cfg.layerscale_init else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.ls1(self.attn(self.norm1(x)))  # (B, N, D)
        x = x + self.ls2(self.mlp(self.norm2(x)))
        return x


class ViT(nn.Module):
    # norm slot -> the module whose output is the residual branch that slot feeds
    branch_of: ClassVar[dict[str, str]] = {"norm1": "ls1", "norm2": "ls2"}

    def __init__(self, cfg: ViTConfig, norm_layer: NormLayer) -> None:
        super().__init__()
        self.cfg = cfg
        ph = min(cfg.patch, cfg.img_size)
        self.patch_embed = nn.Conv2d(cfg.in_chans, cfg.dim, (ph, cfg.patch), (ph, cfg.patch))
        rows, cols = cfg.grid
        self.pos_embed = nn.Parameter(torch.zeros(1, rows * cols, cfg.dim))
        self.blocks = nn.ModuleList(Block(cfg, norm_layer) for _ in range(cfg.depth))
        self.norm_final = norm_layer(cfg.dim)  # applied after average pooling (official ViT)
        self.head = nn.Linear(cfg.dim, cfg.num_classes)
        self.initialize_weights()

    def _std(self, fan_in: int, scope: str) -> float:
        ref = self.cfg.init_fan_in_ref
        if ref and self.cfg.init_scope in (scope, "all"):
            return 0.02 * math.sqrt(ref / fan_in)
        return 0.02

    def initialize_weights(self) -> None:
        """Every init decision in one place (normalization-free training is init-sensitive)."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                # trunc-normal(0.02) weights, zero bias: the ViT/DeiT/DyT reference init
                nn.init.trunc_normal_(m.weight, std=self._std(m.in_features, "linear"))
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        # patch embedding as a linear layer over flattened patches (like ViT's). A 2x2 patch has
        # fan-in 4, not 768: with plain 0.02 the stream would start at std ~0.04, where every
        # pointwise norm is linear; gain matching (init_fan_in_ref) restores the ViT-B scale.
        w = self.patch_embed.weight
        w2 = w.view(w.shape[0], -1)  # (D, C*ph*pw)
        nn.init.trunc_normal_(w2, std=self._std(w2.shape[1], "patch"))
        nn.init.zeros_(self.patch_embed.bias)
        # learned positional embedding, small so tokens start close to their content
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        if self.cfg.depth_scaled_init:
            # GPT-2: each of the 2L branches adds variance ~1/(2L), so the stream stays bounded
            std = 0.02 / math.sqrt(2 * self.cfg.depth)
            for blk in self.blocks:
                nn.init.trunc_normal_(blk.attn.proj.weight, std=std)
                nn.init.trunc_normal_(blk.mlp.fc2.weight, std=std)
        # norm layers keep their own init (alpha0, gamma = 1, beta = 0) from create_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x)  # (B, D, rows, cols)
        x = x.flatten(2).transpose(1, 2) + self.pos_embed  # (B, N, D)
        for blk in self.blocks:
            x = blk(x)
        x = self.norm_final(x.mean(dim=1))  # pool, then the final norm: (B, D)
        return self.head(x)  # (B, classes)
