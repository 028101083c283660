"""The proxies' model configs: plain dataclasses, no torch.

They live apart from the models so that the preset registry (``PROXIES``), which is data, can be
imported by the CLI and the API without importing torch; ``vit.py`` and ``dit.py`` build the
models from them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass
class ViTConfig:
    in_chans: int = 1  # greyscale digits; 3 for CIFAR-like user data
    img_size: int = 8  # sklearn digits are 8x8
    img_width: int = 0  # 0: square images; MNIST-1D is 1 x 40 (height 1, width 40)
    patch: int = 2  # 2x2 patches of an 8x8 image give 16 tokens: enough for attention to matter
    num_classes: int = 10
    dim: int = 64  # the planning measurement's width; small enough for one CPU core
    depth: int = 4  # 4 blocks = 9 norm slots, each a place for the candidate to fail
    heads: int = 4  # head size 16
    mlp_ratio: float = 4.0  # the standard ViT expansion
    qkv_bias: bool = True  # official DyT/Derf ViT runs use qkv bias
    layerscale_init: float = 0.0  # 0 = off (the official runs); CaiT uses 0.1 .. 1e-6 by depth
    depth_scaled_init: bool = False  # std 0.02/sqrt(2*depth) on each branch's last projection
    # Gain-matched init: std 0.02*sqrt(ref/fan_in) instead of 0.02, so a layer of this small
    # proxy scales its input as the same layer of a ViT-B/16 (fan-in 768) does. 0 = plain 0.02.
    init_fan_in_ref: int = 0
    init_scope: str = "patch"  # where gain matching applies: "patch" (embedding only) or "all"

    @property
    def grid(self) -> tuple[int, int]:
        """Token grid (rows, cols); a height-1 input (MNIST-1D) uses 1 x patch patches."""
        w = self.img_width or self.img_size
        ph = min(self.patch, self.img_size)
        return self.img_size // ph, w // self.patch


STATISTIC_NORMS = ("layernorm", "rmsnorm")  # norms that keep adaLN-Zero on the final layer


@dataclass
class DiTConfig:
    in_chans: int = 1  # greyscale digits
    img_size: int = 8  # sklearn digits are 8x8
    img_width: int = 0  # 0: square
    patch: int = 2  # 16 tokens per 8x8 image
    num_classes: int = 10  # class-conditional, as DiT
    dim: int = 64  # small enough for one CPU core
    depth: int = 4  # 4 blocks = 9 norm slots
    heads: int = 4  # head size 16
    mlp_ratio: float = 4.0  # DiT's expansion
    timesteps: int = 100  # small-T schedule: betas scaled by 1000/T (improved DDPM) keep it valid
    sample_steps: int = 25  # deterministic DDIM steps for the sample-quality metric
    adaln_zero: bool = True  # zero-init every block's modulation: blocks start as identity
    # "sincos": DiT's fixed 2-D sine-cosine positions (std ~0.7, so the stream a norm first sees
    # has the scale it has in DiT); "learned": a learned table initialised at std 0.02.
    pos_embed: str = "learned"
    # None: by norm kind (True for layernorm/rmsnorm, False for pointwise norms and identity).
    zero_init_final: bool | None = None


def resolve_zero_init_final(cfg: DiTConfig, norm_name: str) -> DiTConfig:
    """Fix ``zero_init_final`` from the norm kind when it was left to the default."""
    if cfg.zero_init_final is not None:
        return cfg
    return replace(cfg, zero_init_final=norm_name in STATISTIC_NORMS)
