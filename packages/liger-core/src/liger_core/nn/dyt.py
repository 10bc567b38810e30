from __future__ import annotations

import torch
from torch import nn

from liger_core.functional import liger_dyt


class LigerDyT(nn.Module):
    """Dynamic Tanh, ``gamma * tanh(alpha * x) + beta``: a normalisation-free stand-in for
    LayerNorm. ``alpha`` starts at ``init_alpha``, ``gamma`` at ones, ``beta`` (present
    when ``beta=True``) at zeros, as in Liger Kernel."""

    def __init__(
        self,
        hidden_size: int,
        beta: bool = True,
        init_alpha: float = 0.5,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.init_alpha = init_alpha
        self.alpha = nn.Parameter(torch.full((1,), float(init_alpha), device=device, dtype=dtype))
        self.gamma = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        if beta:
            self.beta = nn.Parameter(torch.zeros(hidden_size, device=device, dtype=dtype))
        else:
            self.register_parameter("beta", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return liger_dyt(x, self.alpha, self.gamma, self.beta)

    def extra_repr(self) -> str:
        return f"{self.hidden_size}, init_alpha={self.init_alpha}, beta={self.beta is not None}"
