"""dyt's driver (`liger_core.ops.dyt`): the autograd Function over a vendor's kernels.

Policies where the vendors differed: the input rows, alpha, gamma and beta are saved (Ascend saved
beta's dtype only: the same memory, since beta is a parameter alive anyway); backward is told
whether any parameter needs a gradient (CUDA's, which then skips the per-program partial sums; a
vendor may compute them regardless); the launch plan or hardware facts are the forward's opaque
``state`` (XPU's and Ascend's; CUDA plans per call).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.drivers._rows import as_rows
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.dyt import check_args

PROTOCOL = 1


class DyTKernels(Protocol):
    """What a vendor provides. Rows are ``(n_rows, n_cols)`` views with unit column stride (any row
    stride, 0 included for a gradient broadcast over rows); ``n_rows`` or ``n_cols`` may be 0.
    ``alpha`` is a one-element tensor, ``gamma`` and ``beta`` (optional) ``(n_cols,)``, as the op's
    contract admits them."""

    protocol: int

    def forward(
        self, x2d: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None
    ) -> tuple[torch.Tensor, Any]:
        """``(y, state)``: ``gamma * tanh(alpha * x) (+ beta)`` as a new ``(n_rows, n_cols)`` tensor
        of x's dtype, and whatever backward needs besides the saved inputs (None if nothing)."""

    def backward(
        self,
        dy2d: torch.Tensor,
        x2d: torch.Tensor,
        alpha: torch.Tensor,
        gamma: torch.Tensor,
        beta: torch.Tensor | None,
        need_param_grads: bool,
        state: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        """``(grad_x, grad_alpha, grad_gamma, grad_beta)``: grad_x a new ``(n_rows, n_cols)``
        tensor, each parameter's gradient in its dtype and shape (grad_beta None without beta);
        the parameters' may be None when ``need_param_grads`` is False."""


def autograd_function(kernels: DyTKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerDyTFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "dyt", PROTOCOL)

    def forward(ctx, x, alpha, gamma, beta):
        check_args(x, alpha, gamma, beta)
        x2d = as_rows(x)
        y, ctx.state = kernels.forward(x2d, alpha, gamma, beta)
        ctx.save_for_backward(x2d, alpha, gamma, beta)
        return y.view(x.shape)

    def backward(ctx, dy):
        x2d, alpha, gamma, beta = ctx.saved_tensors
        need_param_grads = any(ctx.needs_input_grad[1:])
        dx, d_alpha, d_gamma, d_beta = kernels.backward(
            as_rows(dy), x2d, alpha, gamma, beta, need_param_grads, ctx.state
        )
        return dx.view(dy.shape), d_alpha, d_gamma, d_beta

    return build_function("LigerDyTFunction", module, forward, backward)
