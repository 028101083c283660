"""``PointwiseNorm``: the thin nn.Module over :func:`pointwise_norm`."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from normfree.kernels._ops import Backend, CandidateLike, compile_candidate, pointwise_norm
from normfree.kernels._options import KernelOptions

Shift = Literal["none", "scalar", "channel"]
AlphaParam = Literal["linear", "log"]


class PointwiseNorm(nn.Module):
    """y = gamma * f(alpha * x + s) + beta over the last dimension (science.md section 1).

    Parameters carry fixed names so optimisers and diagnostics find them: ``alpha`` (0-d, init
    ``alpha0``), ``s`` (0-d for ``shift="scalar"``, ``[D]`` for ``"channel"``, absent for
    ``"none"``; init 0), ``gamma``/``beta`` (``[D]``, init 1/0; absent when ``affine=False``).
    None of them should get weight decay: :meth:`no_decay_parameters` lists them.
    ``kernels``: where its generated code lives and what "auto" runs on CPU (None: the process
    default, :func:`normfree.kernels.default_options`).
    """

    def __init__(
        self,
        candidate: CandidateLike,
        dim: int,
        *,
        shift: Shift = "none",
        affine: bool = True,
        alpha0: float = 0.5,
        learn_alpha: bool = True,
        alpha_param: AlphaParam = "linear",
        backend: Backend = "auto",
        kernels: KernelOptions | None = None,
    ) -> None:
        super().__init__()
        if shift not in ("none", "scalar", "channel"):
            raise ValueError(f"shift must be 'none', 'scalar' or 'channel', got {shift!r}")
        self.candidate = candidate
        self.dim = dim
        self.shift = shift
        self.affine = affine
        self.backend: Backend = backend
        self._op = compile_candidate(candidate, kernels)
        if alpha_param not in ("linear", "log"):
            raise ValueError(f"alpha_param must be 'linear' or 'log', got {alpha_param!r}")
        self.alpha_param = alpha_param if learn_alpha else "linear"
        if self.alpha_param == "log":
            # alpha = sign * exp(log_alpha): Adam's steps on log_alpha are relative changes of
            # alpha, so alpha travels by factors (0.5 -> 0.05 as easily as 0.5 -> 5) and never
            # crosses zero, however large its learning rate.
            if alpha0 == 0:
                raise ValueError("alpha_param='log' needs a non-zero alpha0")
            self.register_buffer("alpha_sign", torch.tensor(1.0 if alpha0 > 0 else -1.0))
            self.log_alpha = nn.Parameter(torch.tensor(math.log(abs(float(alpha0)))))
        else:
            # a fixed alpha stays a (frozen) parameter: same state_dict, same diagnostics
            self.register_parameter(
                "alpha", nn.Parameter(torch.tensor(float(alpha0)), requires_grad=learn_alpha)
            )
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

    @property
    def alpha(self) -> Tensor:
        """alpha as the operator uses it (0-d), whichever way it is parameterised."""
        if self.alpha_param == "log":
            return self.alpha_sign * self.log_alpha.exp()
        try:
            return self._parameters["alpha"]  # type: ignore[return-value]
        except KeyError:  # during __init__, before it is registered
            raise AttributeError("alpha") from None

    def forward(self, x: Tensor) -> Tensor:
        return pointwise_norm(
            x, self._op, self.alpha, self.s, self.gamma, self.beta, backend=self.backend
        )

    def no_decay_parameters(self) -> list[nn.Parameter]:
        scalar = self.log_alpha if self.alpha_param == "log" else self.alpha
        return [
            p for p in (scalar, self.s, self.gamma, self.beta) if p is not None and p.requires_grad
        ]

    def extra_repr(self) -> str:
        name = getattr(self.candidate, "name", "?")
        fixed = "" if self.alpha.requires_grad else f", alpha fixed at {float(self.alpha):g}"
        fixed += ", log alpha" if self.alpha_param == "log" else ""
        return f"{name}, {self.dim}, shift={self.shift}, affine={self.affine}{fixed}"
