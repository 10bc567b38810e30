from __future__ import annotations

import torch
from torch import nn

from liger_core.functional import liger_poly_norm


class LigerPolyNorm(nn.Module):
    """PolyNorm (PolyCom): ``w0 * n(x^3) + w1 * n(x^2) + w2 * n(x) + b`` over the last
    dimension, ``n(u) = u / sqrt(mean(u^2) + eps)``.

    Starts as Liger Kernel's module does: weight ``(1/3, 1/3, 1/3)``, bias ``1.0`` (shape
    ``(1,)``). ``in_place`` is accepted for compatibility with Liger Kernel's constructor
    and changes nothing: this op's backward never writes into the incoming gradient.
    """

    def __init__(
        self,
        eps: float = 1e-6,
        in_place: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.full((3,), 1.0 / 3.0, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.ones(1, device=device, dtype=dtype))
        self.variance_epsilon = eps
        self.in_place = in_place

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return liger_poly_norm(hidden_states, self.weight, self.bias, self.variance_epsilon)

    def extra_repr(self) -> str:
        return f"eps={self.variance_epsilon}"
