"""group_norm's driver (`liger_core.ops.group_norm`): the autograd Function over a vendor's kernels.

The driver checks the arguments, lays x out as contiguous ``(batch, channels, spatial)`` (the
channels of one group then form one contiguous block per sample; the vendors agreed on that),
brings the incoming gradient to the same layout, saves what the backward reads, allocates
grad_x and asks only for the parameter gradients autograd needs.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.group_norm import check_args

PROTOCOL = 1


class GroupNormKernels(Protocol):
    """What a vendor provides. ``x3`` and ``dy3`` are contiguous ``(batch, channels, spatial)``;
    ``weight`` and ``bias`` are None or contiguous ``(channels,)``; ``num_groups`` divides
    ``channels``; ``eps`` is a float. ``state`` is whatever the vendor's forward returned for its
    backward (a plan, the device's facts, or None), handed back unread."""

    protocol: int

    def forward(
        self, x3: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, num_groups: int, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        """``(y3, mean, rstd, state)``: y contiguous in x's dtype, fp32 mean and rstd per
        (sample, group), ``batch * num_groups`` of each."""

    def backward(
        self,
        dy3: torch.Tensor,
        x3: torch.Tensor,
        weight: torch.Tensor | None,
        bias: torch.Tensor | None,
        num_groups: int,
        mean: torch.Tensor,
        rstd: torch.Tensor,
        dx: torch.Tensor,
        need_dw: bool,
        need_db: bool,
        state: Any,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Write grad_x into ``dx`` (contiguous, x3's shape and dtype) and return ``(grad_weight,
        grad_bias)`` in the parameters' dtypes (None for an absent parameter; either may be None
        when its ``need_*`` is False)."""


def autograd_function(kernels: GroupNormKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerGroupNormFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "group_norm", PROTOCOL)

    def forward(ctx, x, weight, bias, num_channels, num_groups, eps):
        check_args(x, weight, bias, num_channels, num_groups, eps)
        x3 = x.reshape(x.shape[0], num_channels, math.prod(x.shape[2:])).contiguous()
        y3, mean, rstd, state = kernels.forward(x3, weight, bias, num_groups, float(eps))
        ctx.save_for_backward(x3, weight, bias, mean, rstd)
        ctx.num_groups, ctx.state = num_groups, state
        return y3.view(x.shape)

    def backward(ctx, dy):
        x3, weight, bias, mean, rstd = ctx.saved_tensors
        dx = torch.empty_like(x3)
        need_dw = weight is not None and ctx.needs_input_grad[1]
        need_db = bias is not None and ctx.needs_input_grad[2]
        dy3 = dy.reshape(x3.shape).contiguous()
        dw, db = kernels.backward(dy3, x3, weight, bias, ctx.num_groups, mean, rstd, dx, need_dw, need_db, ctx.state)
        return dx.view(dy.shape), (dw if need_dw else None), (db if need_db else None), None, None, None

    return build_function("LigerGroupNormFunction", module, forward, backward)
