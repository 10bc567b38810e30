"""Activation modules (the ungated ones; the gated MLPs are in `liger_core.nn.mlp`)."""

from __future__ import annotations

import torch
from torch import nn

from liger_core.functional import liger_relu_squared


class LigerReLUSquared(nn.Module):
    """``relu(x) ** 2``: a drop-in for transformers' ``ReLUSquaredActivation`` (Nemotron's ``relu2``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return liger_relu_squared(x)
