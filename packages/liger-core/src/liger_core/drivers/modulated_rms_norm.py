"""modulated_rms_norm's driver (`liger_core.ops.modulated_rms_norm`): the autograd Function over
a vendor's kernels.

The driver checks the arguments, lays out x's rows and the modulation rows (``scale`` and
``shift`` as ``(M, hidden)``, each shared by ``per`` consecutive rows of x), applies the in-place
policy of rms_norm (`_rows.grad_buffer`), saves x's rows, the weight, rstd, the scale rows and
whatever else the vendor's backward reads (``saved``: a vendor that normalises and modulates in
two passes keeps the normalised rows), and restores the gradients' shapes and dtypes.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.drivers._rows import as_rows, grad_buffer
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.modulated_rms_norm import check_args, modulation_rows

PROTOCOL = 1


class ModulatedRMSNormKernels(Protocol):
    """What a vendor provides. ``x2d`` and ``dy2d`` are ``(n_rows, hidden)`` with unit column
    stride and any row stride (the incoming gradient's may be 0); ``scale2d`` and ``shift2d``
    (None: no shift) are contiguous ``(M, hidden)``, row ``i // per`` modulating row ``i``;
    ``weight`` is None or contiguous ``(hidden,)``; ``eps`` and ``offset`` are floats.
    ``saved`` (tensors, saved for backward by the driver) and ``state`` (anything else) are what
    the vendor's forward returned for its backward, handed back unread."""

    protocol: int

    def forward(
        self,
        x2d: torch.Tensor,
        weight: torch.Tensor | None,
        scale2d: torch.Tensor,
        shift2d: torch.Tensor | None,
        per: int,
        eps: float,
        offset: float,
        casting_mode: str,
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...], Any]:
        """``(y2d, rstd, saved, state)``: y in x's dtype (a new buffer), fp32 rstd per row."""

    def backward(
        self,
        dy2d: torch.Tensor,
        x2d: torch.Tensor,
        weight: torch.Tensor | None,
        scale2d: torch.Tensor,
        rstd: torch.Tensor,
        saved: tuple[torch.Tensor, ...],
        per: int,
        offset: float,
        casting_mode: str,
        dx: torch.Tensor,
        shift_dtype: torch.dtype | None,
        state: Any,
    ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
        """Write grad_x into ``dx`` (x2d's shape and dtype, contiguous; it may be ``dy2d``
        itself: in place) and return ``(grad_weight, grad_scale, grad_shift)``: grad_weight in
        the weight's dtype (None without one), grad_scale ``(M, hidden)`` in scale's dtype,
        grad_shift ``(M, hidden)`` in ``shift_dtype`` (None without a shift)."""


def autograd_function(kernels: ModulatedRMSNormKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerModulatedRMSNormFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "modulated_rms_norm", PROTOCOL)

    def forward(ctx, x, weight, scale, shift, eps, offset, casting_mode, in_place):
        check_args(x, weight, scale, shift, eps, offset, casting_mode, in_place)
        x2d = as_rows(x)
        m, per = modulation_rows(x, scale)
        scale2d = scale.reshape(m, x.shape[-1]).contiguous()
        shift2d = shift.reshape(m, x.shape[-1]).contiguous() if shift is not None else None
        y2d, rstd, saved, state = kernels.forward(
            x2d, weight, scale2d, shift2d, per, float(eps), float(offset), casting_mode
        )
        ctx.save_for_backward(x2d, weight, rstd, scale2d, *saved)
        ctx.offset, ctx.casting_mode, ctx.in_place, ctx.per, ctx.state = (
            float(offset), casting_mode, in_place, per, state,
        )  # fmt: skip
        ctx.mod = (scale.shape, None if shift is None else (shift.shape, shift.dtype))
        return y2d.view(x.shape)

    def backward(ctx, dy):
        x2d, weight, rstd, scale2d, *saved = ctx.saved_tensors
        scale_shape, shift_meta = ctx.mod
        dy2d = as_rows(dy, x2d.shape[0])
        dx = grad_buffer(dy2d, x2d, ctx.in_place)
        dw, dscale, dshift = kernels.backward(
            dy2d,
            x2d,
            weight,
            scale2d,
            rstd,
            tuple(saved),
            ctx.per,
            ctx.offset,
            ctx.casting_mode,
            dx,
            shift_meta[1] if shift_meta is not None else None,
            ctx.state,
        )
        dshift = dshift.view(shift_meta[0]) if shift_meta is not None else None
        return dx.view(dy.shape), dw, dscale.view(scale_shape), dshift, None, None, None, None

    return build_function("LigerModulatedRMSNormFunction", module, forward, backward)
