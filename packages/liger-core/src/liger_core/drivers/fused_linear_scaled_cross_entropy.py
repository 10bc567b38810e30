"""fused_linear_scaled_cross_entropy's driver (`liger_core.ops.fused_linear_scaled_cross_entropy`):
the autograd Function over a vendor's kernels.

The driver checks the arguments once, lays the input, the projection (cast to the input's dtype,
as autocast would) and the targets out contiguously, saves the per-row statistics and returns
the entropy as a copy in the input's dtype (the float32 rows stay the backward's own). Both
outputs are per token, so the backward always recomputes the chunks; the chunk loops (their
plan under the memory budget, the GEMMs, where grad_weight accumulates) are the vendors'.
The three vendors' policies were the same.
"""

from __future__ import annotations

from typing import Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.fused_linear_scaled_cross_entropy import check_args

PROTOCOL = 1


class FusedLinearScaledCrossEntropyKernels(Protocol):
    """What a vendor provides. ``x`` (tokens, hidden) and ``w`` (vocab, hidden) are contiguous,
    of one dtype; ``inv_temperature`` is ``1 / temperature``."""

    protocol: int

    def forward(
        self, x: torch.Tensor, w: torch.Tensor, target: torch.Tensor, inv_temperature: float, ignore_index: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(nll, entropy, lse, target)``: per-token float32 rows (0 for ignored tokens), and the
        targets as the kernels take them (``target`` is contiguous; saved for `backward`). Raises
        for targets out of range."""

    def backward(
        self,
        x: torch.Tensor,
        w: torch.Tensor,
        target: torch.Tensor,
        lse: torch.Tensor,
        entropy: torch.Tensor,
        grad_nll: torch.Tensor | None,
        grad_entropy: torch.Tensor | None,
        inv_temperature: float,
        ignore_index: int,
        need_x: bool,
        need_w: bool,
        weight_dtype: torch.dtype,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``(grad_input, grad_weight)`` (None where not needed; grad_weight in ``weight_dtype``)
        for the per-token incoming gradients (float32, contiguous; None: that output feeds
        nothing), recomputing the chunks. The other tensors as `forward` had or returned them."""


def autograd_function(kernels: FusedLinearScaledCrossEntropyKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerFusedLinearScaledCrossEntropyFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "fused_linear_scaled_cross_entropy", PROTOCOL)

    def forward(ctx, input, weight, target, temperature, ignore_index):
        check_args(input, weight, target, temperature, ignore_index)
        x = input.contiguous()
        w = weight if weight.dtype == x.dtype else weight.to(x.dtype)  # as autocast would
        w = w.contiguous()
        inv_t = 1.0 / float(temperature)
        nll, entropy, lse, t = kernels.forward(x, w, target.contiguous(), inv_t, ignore_index)
        ctx.set_materialize_grads(False)
        ctx.args = (inv_t, ignore_index, weight.dtype)
        ctx.save_for_backward(x, w, t, lse, entropy)
        return nll, entropy.to(x.dtype, copy=True)  # the fp32 rows stay backward's own

    def backward(ctx, grad_nll, grad_entropy):
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if (grad_nll is None and grad_entropy is None) or not (need_x or need_w):
            return None, None, None, None, None
        x, w, t, lse, entropy = ctx.saved_tensors
        inv_t, ignore_index, weight_dtype = ctx.args
        up_nll, up_entropy = (None if g is None else g.float().contiguous() for g in (grad_nll, grad_entropy))
        gx, gw = kernels.backward(
            x, w, t, lse, entropy, up_nll, up_entropy, inv_t, ignore_index, need_x, need_w, weight_dtype
        )
        return gx, gw, None, None, None

    return build_function("LigerFusedLinearScaledCrossEntropyFunction", module, forward, backward)
