"""Attention ops as modules: multi-token attention's key-query convolution, neighborhood attention."""

from __future__ import annotations

import math

import torch
from torch import nn

from liger_core.functional import liger_fused_neighborhood_attention, liger_multi_token_attention


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


class LigerFusedNeighborhoodAttention(nn.Module):
    """Multi-head neighborhood attention over ``(batch, seq, hidden_size)`` hidden states
    (liger-kernel's module of this name): q, k, v projections, `liger_fused_neighborhood_attention`
    per head over a ``kernel_size`` window with ``dilation``, optional dropout on the heads'
    output, then the output projection. ``attention_mask`` is not supported (as in
    liger-kernel): passing one raises NotImplementedError."""

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        kernel_size: int = 7,
        dilation: int = 1,
        bias: bool = True,
        dropout: float = 0.0,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        if hidden_size % num_heads != 0:
            raise ValueError(f"hidden_size ({hidden_size}) must be divisible by num_heads ({num_heads})")
        if kernel_size <= 0:
            raise ValueError(f"kernel_size ({kernel_size}) must be positive")
        if kernel_size % 2 == 0:
            raise ValueError(f"kernel_size ({kernel_size}) must be odd")
        if dilation < 1:
            raise ValueError(f"dilation ({dilation}) must be positive")
        self.hidden_size, self.num_heads = hidden_size, num_heads
        self.head_dim = hidden_size // num_heads
        self.kernel_size, self.dilation = kernel_size, dilation
        self.scale = scale if scale is not None else 1.0 / math.sqrt(self.head_dim)
        self.dropout_p = dropout
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.out_proj = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.dropout = nn.Dropout(dropout) if dropout > 0.0 else None

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if attention_mask is not None:
            raise NotImplementedError("attention_mask is not supported by LigerFusedNeighborhoodAttention")
        batch, seq, _ = hidden_states.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)

        out = liger_fused_neighborhood_attention(
            heads(self.q_proj(hidden_states)),
            heads(self.k_proj(hidden_states)),
            heads(self.v_proj(hidden_states)),
            self.kernel_size,
            self.dilation,
            self.scale,
        )
        out = out.transpose(1, 2).reshape(batch, seq, self.hidden_size)
        if self.dropout is not None:
            out = self.dropout(out)
        return self.out_proj(out)

    def extra_repr(self) -> str:
        return (
            f"hidden_size={self.hidden_size}, num_heads={self.num_heads}, head_dim={self.head_dim}, "
            f"kernel_size={self.kernel_size}, dilation={self.dilation}, scale={self.scale}, dropout={self.dropout_p}"
        )


class LigerFusedNeighborhoodAttentionLayer(nn.Module):
    """Pre-norm residual block around `LigerFusedNeighborhoodAttention` (liger-kernel's layer of
    this name): ``hidden_states + dropout(attention(layer_norm(hidden_states)))``."""

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        kernel_size: int = 7,
        dilation: int = 1,
        bias: bool = True,
        dropout: float = 0.0,
        layer_norm_eps: float = 1e-5,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        self.attention = LigerFusedNeighborhoodAttention(
            hidden_size, num_heads, kernel_size, dilation, bias=bias, dropout=dropout, scale=scale
        )
        self.layer_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout) if dropout > 0.0 else None

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        out = self.attention(self.layer_norm(hidden_states), attention_mask)
        if self.dropout is not None:
            out = self.dropout(out)
        return hidden_states + out
