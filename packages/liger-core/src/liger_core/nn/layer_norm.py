from __future__ import annotations

import torch
from torch import nn

from liger_core.functional import liger_layer_norm
from liger_core.nn._params import init_bias, init_weight


class LigerLayerNorm(nn.Module):
    """LayerNorm over the last dimension, with Liger Kernel's constructor.

    As in Liger Kernel, the module always holds ``weight`` and ``bias`` parameters (so
    LayerNorm checkpoints load): ``init_fn`` sets the weight (``"ones"`` or ``"zeros"``);
    the bias starts at zero, or random normal with ``bias=True`` as Liger Kernel does.
    """

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-6,
        bias: bool = False,
        init_fn: str = "ones",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.eps = self.variance_epsilon = eps
        self.weight = init_weight("LigerLayerNorm", hidden_size, init_fn, device, dtype)
        self.bias = init_bias(hidden_size, bias, device, dtype)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return liger_layer_norm(hidden_states, self.weight, self.bias, self.variance_epsilon)

    def extra_repr(self) -> str:
        return f"{self.hidden_size}, eps={self.eps}"
