"""Attention ops as modules: multi-token attention's key-query convolution."""

from __future__ import annotations

import math

import torch
from torch import nn

from liger_core.functional import liger_multi_token_attention


class LigerMultiTokenAttention(nn.Module):
    """``mask_0(conv2d(softmax(mask_-inf(scores))))`` with a learnt ``(out_channels,
    in_channels // groups, kernel_size, kernel_size)`` weight (liger-kernel's module of this
    name); ``sparse`` uses sparsemax. Parameters are initialised as ``nn.Conv2d``'s weight
    (Kaiming uniform) with a zero bias, as liger-kernel does."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: int = 0,
        dilation: int = 1,
        groups: int = 1,
        bias: bool = True,
        sparse: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = (kernel_size, kernel_size)
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.sparse = sparse
        factory = dict(device=device, dtype=dtype)
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels // groups, *self.kernel_size, **factory))
        self.bias = nn.Parameter(torch.empty(out_channels, **factory)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return liger_multi_token_attention(
            scores, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups, self.sparse
        )

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
            f"padding={self.padding}, dilation={self.dilation}, groups={self.groups}, "
            f"bias={self.bias is not None}, sparse={self.sparse}"
        )
