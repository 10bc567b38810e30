"""softmax's driver (`liger_core.ops.softmax`): the autograd Function over a vendor's kernels.

All three vendors saved the output (backward is ``y * (dy - sum(dy * y))``, no input needed) and
kept their launch plan (CUDA recomputed it; XPU's tile plan and Ascend's hardware facts rode in
ctx): the plan is the forward's opaque ``state`` here, so no vendor plans twice.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.drivers._rows import as_rows
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.softmax import check_args

PROTOCOL = 1


class SoftmaxKernels(Protocol):
    """What a vendor provides. Rows are ``(n_rows, n_cols)`` views with unit column stride (any
    row stride, 0 included for a gradient broadcast over rows); ``n_rows`` or ``n_cols`` may be 0."""

    protocol: int

    def forward(self, x2d: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """``(y, state)``: the softmax of each row, a new contiguous ``(n_rows, n_cols)`` tensor of
        x's dtype, and whatever the backward needs besides y (its plan; None if nothing)."""

    def backward(self, dy2d: torch.Tensor, y: torch.Tensor, state: Any) -> torch.Tensor:
        """``y * (dy - sum(dy * y, -1))`` in float32, a new contiguous tensor of y's dtype; ``y``
        and ``state`` are the forward's."""


def autograd_function(kernels: SoftmaxKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerSoftmaxFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "softmax", PROTOCOL)

    def forward(ctx, x):
        check_args(x)
        y, ctx.state = kernels.forward(as_rows(x))
        ctx.save_for_backward(y)
        return y.view(x.shape)

    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return kernels.backward(as_rows(dy), y, ctx.state).view(dy.shape)

    return build_function("LigerSoftmaxFunction", module, forward, backward)
