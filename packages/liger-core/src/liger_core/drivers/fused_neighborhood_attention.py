"""fused_neighborhood_attention's driver (`liger_core.ops.fused_neighborhood_attention`): the
autograd Function over a vendor's kernels.

query, key, value and the incoming gradient are handed over ``(batch, heads, seq, head_dim)``
with unit head_dim stride (a copy only where it is strided; any batch, head and seq strides
otherwise). A vendor whose hardware needs more (Ascend: 32-byte aligned row pitches) lays them out
inside its methods; its forward returns the q, k, v it used, which the driver saves for backward.
"""

from __future__ import annotations

from typing import Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.fused_neighborhood_attention import check_args, default_scale

PROTOCOL = 1


class FusedNeighborhoodAttentionKernels(Protocol):
    """What a vendor provides."""

    protocol: int

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel_size: int, dilation: int, scale: float
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """``(out, lse, (q, k, v))``: out ``(batch, heads, seq, head_dim)`` in q's dtype, lse
        float32 ``(batch, heads, seq)``, and q, k, v as `backward` takes them back."""

    def backward(
        self,
        grad_out: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        out: torch.Tensor,
        lse: torch.Tensor,
        kernel_size: int,
        dilation: int,
        scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(grad_q, grad_k, grad_v)`` in the inputs' shapes and dtypes."""


def _heads(t: torch.Tensor) -> torch.Tensor:
    # Unit head_dim stride; the kernels take any other strides.
    return t if t.stride(-1) == 1 or t.shape[-1] <= 1 else t.contiguous()


def autograd_function(kernels: FusedNeighborhoodAttentionKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerFusedNeighborhoodAttentionFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "fused_neighborhood_attention", PROTOCOL)

    def forward(ctx, query, key, value, kernel_size, dilation, scale):
        check_args(query, key, value, kernel_size, dilation, scale)
        scale = default_scale(query.shape[-1], scale)
        out, lse, qkv = kernels.forward(_heads(query), _heads(key), _heads(value), kernel_size, dilation, scale)
        ctx.save_for_backward(*qkv, out, lse)
        ctx.options = (kernel_size, dilation, scale)
        return out

    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = kernels.backward(_heads(grad_out), q, k, v, out, lse, *ctx.options)
        return dq, dk, dv, None, None, None

    return build_function("LigerFusedNeighborhoodAttentionFunction", module, forward, backward)
