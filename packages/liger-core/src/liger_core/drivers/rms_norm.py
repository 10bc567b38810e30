"""The drivers of rms_norm and fused_add_rms_norm (`liger_core.ops.rms_norm`,
`liger_core.ops.fused_add_rms_norm`): their autograd Functions over a vendor's kernels.

The driver checks the arguments, lays out rows (unit column stride; a gradient broadcast over
rows keeps its stride 0), applies the in-place policy (`_rows.grad_buffer`: grad_x into the
incoming gradient when it has dense rows of x's dtype; the vendors differed for a broadcast
gradient: two copied it and wrote into the copy, one used a new buffer, the cheaper, kept here),
allocates grad_x and grad_residual and saves what the backward needs.

fused_add_rms_norm: the backward normalised ``s = x + residual`` (the new residual), so that is
saved rather than x and the residual. Its gradient ``grad_x`` is also the residual's: one buffer
when the dtypes agree (as autograd's own ``x + residual`` gives); a second in the residual's dtype
otherwise (the vendors differed: two always allocated the second buffer). An unused output gets
no gradient (``None``, not a tensor of zeros); when only the new residual is used its gradient
passes straight to x and the residual, and the weight gets none, as in the reference.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.drivers._rows import as_rows, grad_buffer, in_layout, memory_order_rows, rows_in_layout
from liger_core.ops import fused_add_rms_norm, rms_norm
from liger_core.ops._losses import autograd_function as build_function

PROTOCOL = 1


class RMSNormKernels(Protocol):
    """What a vendor provides. Row tensors (``*2d``) are ``(n_rows, n_cols)`` with unit column
    stride and any row stride (an incoming gradient's may be 0); ``weight`` is None or contiguous
    ``(n_cols,)``; ``eps`` and ``offset`` are floats; ``casting_mode`` is "llama", "gemma" or "none".
    ``state`` is whatever the vendor's forward returned for its backward (a plan, the device's
    facts, or None); the driver keeps it and hands it back unread."""

    protocol: int

    def forward(
        self, x2d: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float, casting_mode: str
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """``(y2d, rstd, state)``: y in x's dtype (new buffer) and the fp32 reciprocal RMS per row."""

    def backward(
        self,
        dy2d: torch.Tensor,
        x2d: torch.Tensor,
        weight: torch.Tensor | None,
        rstd: torch.Tensor,
        offset: float,
        casting_mode: str,
        dx: torch.Tensor,
        need_dw: bool,
        state: Any,
    ) -> torch.Tensor | None:
        """Write grad_x into ``dx`` (x2d's shape and dtype, contiguous; it may be ``dy2d`` itself:
        in place) and return grad_weight in the weight's dtype (None without a weight; it may be
        None when ``need_dw`` is False)."""

    def fused_add_forward(
        self,
        x2d: torch.Tensor,
        residual2d: torch.Tensor,
        weight: torch.Tensor | None,
        eps: float,
        offset: float,
        casting_mode: str,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        """``(y2d, s2d, rstd, state)``: s = x + residual rounded to x's dtype (the new residual,
        a new contiguous buffer), y = rms_norm(s), rstd of s."""

    def fused_add_backward(
        self,
        dy2d: torch.Tensor,
        dres2d: torch.Tensor | None,
        s2d: torch.Tensor,
        weight: torch.Tensor | None,
        rstd: torch.Tensor,
        offset: float,
        casting_mode: str,
        dx: torch.Tensor,
        dr: torch.Tensor | None,
        need_dw: bool,
        state: Any,
    ) -> torch.Tensor | None:
        """As `backward` on the new residual ``s2d``, plus ``dres2d`` (the new residual's incoming
        gradient, None when unused) added to grad_x; ``dr`` (None: grad_x is the residual's gradient
        too) is a contiguous buffer in the residual's dtype to receive grad_x as well."""


def autograd_functions(kernels: RMSNormKernels, module: str) -> dict[str, type[torch.autograd.Function]]:
    """``{"rms_norm": LigerRMSNormFunction, "fused_add_rms_norm": LigerFusedAddRMSNormFunction}``
    over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "rms_norm", PROTOCOL)

    def rms_norm_forward(ctx, x, weight, eps, offset, casting_mode, in_place):
        rms_norm.check_args(x, weight, eps, offset, casting_mode, in_place)
        # A dense permuted input (Gemma-3's q/k norms get the transposed query view) is read in memory
        # order, and y and grad_x keep its layout, as stock PyTorch's elementwise ops do (see
        # `_rows.memory_order_rows`); anything else goes through logical rows.
        x2d = None if x.is_contiguous() else memory_order_rows(x)
        ctx.layout = None if x2d is None else (x.shape, x.stride())
        if x2d is None:
            x2d = as_rows(x)
        y2d, rstd, state = kernels.forward(x2d, weight, float(eps), float(offset), casting_mode)
        ctx.save_for_backward(x2d, weight, rstd)
        ctx.offset, ctx.casting_mode, ctx.in_place, ctx.state = float(offset), casting_mode, in_place, state
        return y2d.view(x.shape) if ctx.layout is None else in_layout(y2d, *ctx.layout)

    def rms_norm_backward(ctx, dy):
        x2d, weight, rstd = ctx.saved_tensors
        if ctx.layout is None:
            dy2d = as_rows(dy, x2d.shape[0])
        else:
            dy2d = rows_in_layout(dy, *ctx.layout)
        dx = grad_buffer(dy2d, x2d, ctx.in_place)
        need_dw = weight is not None and ctx.needs_input_grad[1]
        dw = kernels.backward(dy2d, x2d, weight, rstd, ctx.offset, ctx.casting_mode, dx, need_dw, ctx.state)
        grad_x = dx.view(dy.shape) if ctx.layout is None else in_layout(dx, *ctx.layout)
        return grad_x, (dw if need_dw else None), None, None, None, None

    def fused_add_forward(ctx, x, residual, weight, eps, offset, casting_mode, in_place):
        fused_add_rms_norm.check_args(x, residual, weight, eps, offset, casting_mode, in_place)
        y2d, s2d, rstd, state = kernels.fused_add_forward(
            as_rows(x), as_rows(residual), weight, float(eps), float(offset), casting_mode
        )
        ctx.save_for_backward(s2d, weight, rstd)
        ctx.offset, ctx.casting_mode, ctx.in_place, ctx.state = float(offset), casting_mode, in_place, state
        ctx.residual_dtype = residual.dtype
        ctx.set_materialize_grads(False)
        return y2d.view(x.shape), s2d.view(x.shape)

    def fused_add_backward(ctx, dy, dres):
        s2d, weight, rstd = ctx.saved_tensors
        if dy is None:
            # Only the new residual was used: its gradient passes straight to x and residual.
            return dres.to(s2d.dtype), dres.to(ctx.residual_dtype), None, None, None, None, None
        dy2d = as_rows(dy, s2d.shape[0])
        dres2d = None if dres is None else as_rows(dres, s2d.shape[0])
        dx = grad_buffer(dy2d, s2d, ctx.in_place)
        dr = None
        if ctx.residual_dtype != s2d.dtype:
            dr = torch.empty(s2d.shape, dtype=ctx.residual_dtype, device=s2d.device)
        need_dw = weight is not None and ctx.needs_input_grad[2]
        dw = kernels.fused_add_backward(
            dy2d, dres2d, s2d, weight, rstd, ctx.offset, ctx.casting_mode, dx, dr, need_dw, ctx.state
        )
        grad_residual = dx if dr is None else dr
        return dx.view(dy.shape), grad_residual.view(dy.shape), (dw if need_dw else None), None, None, None, None

    return {
        "rms_norm": build_function("LigerRMSNormFunction", module, rms_norm_forward, rms_norm_backward),
        "fused_add_rms_norm": build_function(
            "LigerFusedAddRMSNormFunction", module, fused_add_forward, fused_add_backward
        ),
    }
