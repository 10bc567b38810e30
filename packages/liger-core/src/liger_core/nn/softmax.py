"""Softmax and sparsemax as modules."""

from __future__ import annotations

import torch
from torch import nn

from liger_core.functional import liger_softmax, liger_sparsemax


class LigerSoftmax(nn.Module):
    """Softmax over the last dimension."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return liger_softmax(x)


class LigerSparsemax(nn.Module):
    """Sparsemax along ``dim`` (default the last)."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return liger_sparsemax(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
