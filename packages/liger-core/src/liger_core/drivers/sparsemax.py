"""sparsemax's driver (`liger_core.ops.sparsemax`): the autograd Function over a vendor's kernels.

The vendors save different tensors for backward: CUDA the input rows and each row's float32
threshold (no output kept alive; the input usually is anyway), XPU and Ascend the output (its
support is the non-zero set). Both are expressed here: the forward returns the tensors its
backward needs (``saved``), which the driver saves as they are and hands back. The reduced
dimension is moved last with ``movedim`` (CUDA's and XPU's choice; Ascend transposed, which
puts the same elements last in a different order of the other dimensions).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.drivers._rows import as_rows
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.sparsemax import check_args

PROTOCOL = 1


class SparsemaxKernels(Protocol):
    """What a vendor provides. Rows are ``(n_rows, n_cols)`` views with unit column stride (the
    reduced dimension last; any row stride); ``n_rows`` or ``n_cols`` may be 0."""

    protocol: int

    def forward(self, x2d: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...], Any]:
        """``(y, saved, state)``: the sparsemax of each row (a new contiguous ``(n_rows, n_cols)``
        tensor of x's dtype), the tensors backward needs (the driver saves them for backward as
        they are: y, x2d, per-row thresholds...) and any other state (a plan; None if nothing)."""

    def backward(self, dy2d: torch.Tensor, saved: tuple[torch.Tensor, ...], state: Any) -> torch.Tensor:
        """The gradient rows (``dy - mean(dy)`` over each row's support, 0 elsewhere), a new
        contiguous ``(n_rows, n_cols)`` tensor; ``saved`` and ``state`` are the forward's."""


def autograd_function(kernels: SparsemaxKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerSparsemaxFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "sparsemax", PROTOCOL)

    def forward(ctx, x, dim):
        check_args(x, dim)
        moved = x.movedim(dim, -1)
        y, saved, ctx.state = kernels.forward(as_rows(moved))
        ctx.save_for_backward(*saved)
        ctx.dim, ctx.moved_shape = dim, moved.shape
        return y.view(moved.shape).movedim(-1, dim)

    def backward(ctx, dy):
        dx = kernels.backward(as_rows(dy.movedim(ctx.dim, -1)), tuple(ctx.saved_tensors), ctx.state)
        return dx.view(ctx.moved_shape).movedim(-1, ctx.dim), None

    return build_function("LigerSparsemaxFunction", module, forward, backward)
