"""poly_norm's driver (`liger_core.ops.poly_norm`): the autograd Function over a vendor's kernels.

The driver checks the arguments, lays out rows (unit column stride; a gradient broadcast over
rows keeps its stride 0), saves x's rows, the parameters and the vendor's per-row reciprocal
RMS values (their layout is the vendor's), and allocates grad_x.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.drivers._rows import as_rows
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.poly_norm import check_args

PROTOCOL = 1


class PolyNormKernels(Protocol):
    """What a vendor provides. Row tensors (``*2d``) are ``(n_rows, n_cols)`` with unit column
    stride and any row stride (an incoming gradient's may be 0); ``weight`` is ``(3,)`` and
    ``bias`` ``(1,)``, as the contract takes them; ``eps`` is a float. ``state`` is whatever the
    vendor's forward returned for its backward (a plan, the device's facts, or None)."""

    protocol: int

    def forward(
        self, x2d: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """``(y2d, rstd, state)``: y in x's dtype (a new buffer) and the fp32 reciprocal RMS of
        x, x^2 and x^3 per row, laid out as the vendor's backward reads them."""

    def backward(
        self,
        dy2d: torch.Tensor,
        x2d: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        rstd: torch.Tensor,
        dx: torch.Tensor,
        state: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write grad_x into ``dx`` (x2d's shape and dtype, contiguous) and return ``(grad_weight,
        grad_bias)`` in the parameters' dtypes and shapes."""


def autograd_function(kernels: PolyNormKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerPolyNormFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "poly_norm", PROTOCOL)

    def forward(ctx, x, weight, bias, eps):
        check_args(x, weight, bias, eps)
        x2d = as_rows(x)
        y2d, rstd, state = kernels.forward(x2d, weight, bias, float(eps))
        ctx.save_for_backward(x2d, weight, bias, rstd)
        ctx.state = state
        return y2d.view(x.shape)

    def backward(ctx, dy):
        x2d, weight, bias, rstd = ctx.saved_tensors
        dx = torch.empty(x2d.shape, dtype=x2d.dtype, device=x2d.device)
        dw, db = kernels.backward(as_rows(dy, x2d.shape[0]), x2d, weight, bias, rstd, dx, ctx.state)
        return dx.view(dy.shape), dw, db, None

    return build_function("LigerPolyNormFunction", module, forward, backward)
