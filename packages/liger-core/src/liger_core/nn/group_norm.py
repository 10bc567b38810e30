from __future__ import annotations

import torch
from torch import nn

from liger_core.functional import liger_group_norm
from liger_core.nn._params import init_bias, init_weight


class LigerGroupNorm(nn.Module):
    """GroupNorm over ``(batch, channels, *spatial)``, with Liger Kernel's constructor.

    Holds per-channel ``weight`` (``init_fn``: ``"ones"`` or ``"zeros"``) and ``bias``
    (zero, or random normal with ``bias=True`` as Liger Kernel does).
    """

    def __init__(
        self,
        num_channels: int,
        num_groups: int,
        eps: float = 1e-6,
        bias: bool = False,
        init_fn: str = "ones",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if num_groups <= 0 or num_channels % num_groups != 0:
            raise ValueError(
                f"LigerGroupNorm: num_groups must be > 0 and divide num_channels={num_channels}; "
                f"got num_groups={num_groups}"
            )
        self.num_channels = num_channels
        self.num_groups = num_groups
        self.eps = self.variance_epsilon = eps
        self.weight = init_weight("LigerGroupNorm", num_channels, init_fn, device, dtype)
        self.bias = init_bias(num_channels, bias, device, dtype)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return liger_group_norm(
            hidden_states, self.weight, self.bias, self.num_channels, self.num_groups, self.variance_epsilon
        )

    def extra_repr(self) -> str:
        return f"num_channels={self.num_channels}, num_groups={self.num_groups}, eps={self.eps}"
