"""A small class-conditional Diffusion Transformer (DiT) whose norm slots take the candidate.

Reads top-down: embeddings, block, final layer, model, then the diffusion process (schedule,
training loss, validation loss, sampler). As in DiT, each block's norms carry NO affine; the
conditioning c = emb(t) + emb(y) modulates after the norm: x * (1 + scale) + shift, and a gate
scales each residual branch (adaLN). Norms are explicit attributes (``norm1``, ``norm2``,
``norm_final``) built by ``norm_layer(dim)``, never named here.

adaLN-Zero (science.md section 6): the official runs zero-init every modulation (so each block
starts as the identity) and the final layer. Pointwise-norm models in the Derf/DyT DiT runs drop
the zero-init of the final layer. ``DiTConfig.zero_init_final`` makes that explicit: ``None`` means
"decide by norm kind" and is resolved by the trainer (:func:`resolve_zero_init_final`) before the
model is built, so the config the trial records always says which init was used.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from normfree.workers.proxies.configs import DiTConfig
from normfree.workers.proxies.vit import Attention, Mlp

NormLayer = Callable[[int], nn.Module]


def sincos_2d(dim: int, rows: int, cols: int) -> torch.Tensor:
    """Fixed 2-D sine-cosine positions (rows*cols, dim), as DiT uses: half of the channels
    encode the row, half the column, each as sin and cos at dim/4 geometric frequencies."""
    if dim % 4:
        raise ValueError("sin-cos positions need a width divisible by 4")
    quarter = dim // 4
    omega = 1.0 / 10000 ** (torch.arange(quarter, dtype=torch.float64) / quarter)  # (D/4,)

    def axis(pos: torch.Tensor) -> torch.Tensor:
        angles = pos.to(torch.float64)[:, None] * omega[None, :]  # (N, D/4)
        return torch.cat([angles.sin(), angles.cos()], dim=1)  # (N, D/2)

    r, c = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    return torch.cat([axis(r.flatten()), axis(c.flatten())], dim=1).float()  # (N, D)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """adaLN: x * (1 + scale) + shift, per sample, broadcast over tokens."""
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class TimestepEmbedder(nn.Module):
    """Sinusoidal features of t, then an MLP (as DiT)."""

    def __init__(self, dim: int, freq_dim: int = 64) -> None:
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(nn.Linear(freq_dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = self.freq_dim // 2
        steps = torch.arange(half, dtype=torch.float32, device=t.device)
        freqs = torch.exp(-math.log(10000.0) * steps / half)
        args = t.float()[:, None] * freqs[None]  # (B, half)
        return self.mlp(torch.cat([torch.cos(args), torch.sin(args)], dim=-1))  # (B, D)


class DiTBlock(nn.Module):
    """adaLN block; ``branch1``/``branch2`` are Identity hook points on the gated branches."""

    def __init__(self, cfg: DiTConfig, norm_layer: NormLayer) -> None:
        super().__init__()
        self.norm1 = norm_layer(cfg.dim)
        self.attn = Attention(cfg.dim, cfg.heads, qkv_bias=True)
        self.norm2 = norm_layer(cfg.dim)
        self.mlp = Mlp(cfg.dim, cfg.mlp_ratio)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(cfg.dim, 6 * cfg.dim))
        self.branch1 = nn.Identity()
        self.branch2 = nn.Identity()

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        sh1, sc1, g1, sh2, sc2, g2 = self.adaLN_modulation(c).chunk(6, dim=-1)  # each (B, D)
        x = x + self.branch1(g1.unsqueeze(1) * self.attn(modulate(self.norm1(x), sh1, sc1)))
        x = x + self.branch2(g2.unsqueeze(1) * self.mlp(modulate(self.norm2(x), sh2, sc2)))
        return x  # (B, N, D)


class FinalLayer(nn.Module):
    def __init__(self, cfg: DiTConfig, norm_layer: NormLayer) -> None:
        super().__init__()
        self.norm_final = norm_layer(cfg.dim)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(cfg.dim, 2 * cfg.dim))
        ph = min(cfg.patch, cfg.img_size)
        self.linear = nn.Linear(cfg.dim, ph * cfg.patch * cfg.in_chans)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=-1)
        return self.linear(modulate(self.norm_final(x), shift, scale))  # (B, N, p*p*C)


class DiT(nn.Module):
    branch_of: ClassVar[dict[str, str]] = {"norm1": "branch1", "norm2": "branch2"}

    def __init__(self, cfg: DiTConfig, norm_layer: NormLayer) -> None:
        super().__init__()
        if cfg.zero_init_final is None:
            raise ValueError("DiTConfig.zero_init_final is unresolved: use resolve_zero_init_final")
        self.cfg = cfg
        self.ph = min(cfg.patch, cfg.img_size)
        self.rows, self.cols = cfg.img_size // self.ph, (cfg.img_width or cfg.img_size) // cfg.patch
        self.x_embed = nn.Conv2d(cfg.in_chans, cfg.dim, (self.ph, cfg.patch), (self.ph, cfg.patch))
        if cfg.pos_embed not in ("learned", "sincos"):
            raise ValueError(f"pos_embed must be 'learned' or 'sincos', got {cfg.pos_embed!r}")
        self.pos_embed = nn.Parameter(
            torch.zeros(1, self.rows * self.cols, cfg.dim), requires_grad=cfg.pos_embed == "learned"
        )
        self.t_embed = TimestepEmbedder(cfg.dim)
        self.y_embed = nn.Embedding(cfg.num_classes, cfg.dim)
        self.blocks = nn.ModuleList(DiTBlock(cfg, norm_layer) for _ in range(cfg.depth))
        self.final_layer = FinalLayer(cfg, norm_layer)
        self.initialize_weights()

    def initialize_weights(self) -> None:
        """Every init decision in one place, with its reason."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                # DiT: xavier-uniform weights, zero bias for every linear layer
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        w = self.x_embed.weight  # patch embedding initialised like a linear layer
        nn.init.xavier_uniform_(w.view(w.shape[0], -1))
        nn.init.zeros_(self.x_embed.bias)
        if self.cfg.pos_embed == "sincos":  # DiT's own: fixed, not trained
            with torch.no_grad():
                self.pos_embed.copy_(sincos_2d(self.cfg.dim, self.rows, self.cols).unsqueeze(0))
        else:
            nn.init.trunc_normal_(self.pos_embed, std=0.02)  # learned positions
        nn.init.normal_(self.y_embed.weight, std=0.02)  # DiT's label-embedding init
        for lin in (self.t_embed.mlp[0], self.t_embed.mlp[2]):
            nn.init.normal_(lin.weight, std=0.02)  # DiT's timestep-MLP init
        if self.cfg.adaln_zero:
            # adaLN-Zero: shift = scale = gate = 0, so every block starts as the identity map
            for blk in self.blocks:
                nn.init.zeros_(blk.adaLN_modulation[-1].weight)
                nn.init.zeros_(blk.adaLN_modulation[-1].bias)
        if self.cfg.zero_init_final:
            # the model predicts eps = 0 at init (kept for LayerNorm, science.md 6)
            nn.init.zeros_(self.final_layer.adaLN_modulation[-1].weight)
            nn.init.zeros_(self.final_layer.adaLN_modulation[-1].bias)
            nn.init.zeros_(self.final_layer.linear.weight)
            nn.init.zeros_(self.final_layer.linear.bias)

    def unpatchify(self, x: torch.Tensor) -> torch.Tensor:
        b, c = x.shape[0], self.cfg.in_chans
        x = x.view(b, self.rows, self.cols, self.ph, self.cfg.patch, c)  # (B, r, q, ph, pw, C)
        x = x.permute(0, 5, 1, 3, 2, 4)  # (B, C, r, ph, q, pw)
        return x.reshape(b, c, self.rows * self.ph, self.cols * self.cfg.patch)  # (B, C, H, W)

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.x_embed(x).flatten(2).transpose(1, 2) + self.pos_embed  # (B, N, D)
        c = self.t_embed(t) + self.y_embed(y)  # (B, D)
        for blk in self.blocks:
            h = blk(h, c)
        return self.unpatchify(self.final_layer(h, c))  # predicted eps, (B, C, H, W)


# ------------------------------------------------------------------------ diffusion process
class Diffusion:
    """DDPM with a linear beta schedule scaled to T steps (betas * 1000/T, improved DDPM), so a
    short chain still ends near pure noise; epsilon prediction, MSE loss."""

    def __init__(self, timesteps: int) -> None:
        scale = 1000.0 / timesteps
        betas = torch.linspace(1e-4 * scale, 0.02 * scale, timesteps, dtype=torch.float64)
        self.T = timesteps
        self.alpha_bar = torch.cumprod(1.0 - betas, dim=0).float()  # (T,)

    def q_sample(self, x0: torch.Tensor, t: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        ab = self.alpha_bar.to(t.device)[t].view(-1, 1, 1, 1)
        return ab.sqrt() * x0 + (1 - ab).sqrt() * noise

    def loss(
        self,
        model: nn.Module,
        x0: torch.Tensor,
        y: torch.Tensor,
        t: torch.Tensor,
        noise: torch.Tensor,
    ) -> torch.Tensor:
        """Mean squared error of the predicted noise (per-sample loss averaged over the batch)."""
        return F.mse_loss(model(self.q_sample(x0, t, noise), t, y), noise)

    def random_loss(
        self, model: nn.Module, x0: torch.Tensor, y: torch.Tensor, gen: torch.Generator
    ) -> torch.Tensor:
        # Drawn on the CPU generator (the same numbers on every device), then moved to x0's.
        t = torch.randint(0, self.T, (x0.shape[0],), generator=gen).to(x0.device)
        noise = torch.randn(x0.shape, generator=gen).to(x0.device)
        return self.loss(model, x0, y, t, noise)

    @torch.no_grad()
    def sample(
        self, model: nn.Module, y: torch.Tensor, shape: tuple[int, ...], steps: int, seed: int
    ) -> torch.Tensor:
        """Deterministic DDIM (eta = 0) from fixed noise: same model, same samples."""
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn((len(y), *shape), generator=gen).to(y.device)
        ts = torch.linspace(self.T - 1, 0, steps).round().long().unique_consecutive().to(y.device)
        alpha_bar = self.alpha_bar.to(y.device)
        for i, t in enumerate(ts):
            ab = alpha_bar[t]
            ab_prev = alpha_bar[ts[i + 1]] if i + 1 < len(ts) else torch.ones((), device=y.device)
            eps = model(x, t.expand(len(y)), y)
            x0 = ((x - (1 - ab).sqrt() * eps) / ab.sqrt()).clamp(-1, 1)
            eps = (x - ab.sqrt() * x0) / (1 - ab).sqrt()  # consistent with the clipped x0
            x = ab_prev.sqrt() * x0 + (1 - ab_prev).sqrt() * eps
        return x.clamp(-1, 1)
