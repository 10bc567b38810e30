"""layer_norm's driver (`liger_core.ops.layer_norm`): the autograd Function over a vendor's kernels.

The driver checks the arguments, lays out rows (unit column stride; a gradient broadcast over
rows keeps its stride 0), saves x's rows, the parameters and the fp32 per-row mean and rstd,
allocates grad_x and asks only for the parameter gradients autograd needs.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.drivers._rows import as_rows
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.layer_norm import check_args

PROTOCOL = 1


class LayerNormKernels(Protocol):
    """What a vendor provides. Row tensors (``*2d``) are ``(n_rows, n_cols)`` with unit column
    stride and any row stride (an incoming gradient's may be 0); ``weight`` and ``bias`` are None
    or contiguous ``(n_cols,)``; ``eps`` is a float. ``state`` is whatever the vendor's forward
    returned for its backward (a plan, the device's facts, or None), handed back unread."""

    protocol: int

    def forward(
        self, x2d: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        """``(y2d, mean, rstd, state)``: y in x's dtype (a new buffer), fp32 mean and rstd per row."""

    def backward(
        self,
        dy2d: torch.Tensor,
        x2d: torch.Tensor,
        weight: torch.Tensor | None,
        bias: torch.Tensor | None,
        mean: torch.Tensor,
        rstd: torch.Tensor,
        dx: torch.Tensor,
        need_dw: bool,
        need_db: bool,
        state: Any,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Write grad_x into ``dx`` (x2d's shape and dtype, contiguous) and return ``(grad_weight,
        grad_bias)`` in the parameters' dtypes (None for an absent parameter; either may be None
        when its ``need_*`` is False)."""


def autograd_function(kernels: LayerNormKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerLayerNormFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "layer_norm", PROTOCOL)

    def forward(ctx, x, weight, bias, eps):
        check_args(x, weight, bias, eps)
        x2d = as_rows(x)
        y2d, mean, rstd, state = kernels.forward(x2d, weight, bias, float(eps))
        ctx.save_for_backward(x2d, weight, bias, mean, rstd)
        ctx.state = state
        return y2d.view(x.shape)

    def backward(ctx, dy):
        x2d, weight, bias, mean, rstd = ctx.saved_tensors
        dx = torch.empty(x2d.shape, dtype=x2d.dtype, device=x2d.device)
        need_dw = weight is not None and ctx.needs_input_grad[1]
        need_db = bias is not None and ctx.needs_input_grad[2]
        dy2d = as_rows(dy, x2d.shape[0])
        dw, db = kernels.backward(dy2d, x2d, weight, bias, mean, rstd, dx, need_dw, need_db, ctx.state)
        return dx.view(dy.shape), (dw if need_dw else None), (db if need_db else None), None

    return build_function("LigerLayerNormFunction", module, forward, backward)
