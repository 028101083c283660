"""``PointwiseNorm``: the thin nn.Module over :func:`pointwise_norm`."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from normfree.kernels._ops import Backend, CandidateLike, compile_candidate, pointwise_norm

Shift = Literal["none", "scalar", "channel"]


class PointwiseNorm(nn.Module):
    """y = gamma * f(alpha * x + s) + beta over the last dimension (science.md section 1).

    Parameters carry fixed names so optimisers and diagnostics find them: ``alpha`` (0-d, init
    ``alpha0``), ``s`` (0-d for ``shift="scalar"``, ``[D]`` for ``"channel"``, absent for
    ``"none"``; init 0), ``gamma``/``beta`` (``[D]``, init 1/0; absent when ``affine=False``).
    None of them should get weight decay: :meth:`no_decay_parameters` lists them.
    """

    def __init__(
        self,
        candidate: CandidateLike,
        dim: int,
        *,
        shift: Shift = "none",
        affine: bool = True,
        alpha0: float = 0.5,
        backend: Backend = "auto",
    ) -> None:
        super().__init__()
        if shift not in ("none", "scalar", "channel"):
            raise ValueError(f"shift must be 'none', 'scalar' or 'channel', got {shift!r}")
        self.candidate = candidate
        self.dim = dim
        self.shift = shift
        self.affine = affine
        self.backend: Backend = backend
        self._op = compile_candidate(candidate)
        self.alpha = nn.Parameter(torch.tensor(float(alpha0)))
        if shift == "scalar":
            self.s = nn.Parameter(torch.zeros(()))
        elif shift == "channel":
            self.s = nn.Parameter(torch.zeros(dim))
        else:
            self.register_parameter("s", None)
        if affine:
            self.gamma = nn.Parameter(torch.ones(dim))
            self.beta = nn.Parameter(torch.zeros(dim))
        else:
            self.register_parameter("gamma", None)
            self.register_parameter("beta", None)

    def forward(self, x: Tensor) -> Tensor:
        return pointwise_norm(
            x, self._op, self.alpha, self.s, self.gamma, self.beta, backend=self.backend
        )

    def no_decay_parameters(self) -> list[nn.Parameter]:
        return [p for p in (self.alpha, self.s, self.gamma, self.beta) if p is not None]

    def extra_repr(self) -> str:
        name = getattr(self.candidate, "name", "?")
        return f"{name}, {self.dim}, shift={self.shift}, affine={self.affine}"
