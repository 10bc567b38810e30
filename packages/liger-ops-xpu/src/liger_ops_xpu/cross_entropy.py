"""Cross-entropy for Intel GPUs: the autograd Function over the row kernels of _cross_entropy.py.

The logits are never modified unless the caller passes ``in_place=True``: then the backward
writes the gradient over the logits (each block is read before the same program writes it)
instead of allocating a logits-sized buffer. Strided logits (copied first: the gradient lands
in the copy) and padded rows get a separate one.
"""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.ops.cross_entropy import check_args, target_stats

from liger_ops_xpu._cross_entropy import (
    CEOptions,
    cross_entropy_backward,
    cross_entropy_forward,
    reduce_rows,
    weight_total,
)
from liger_ops_xpu._tiling import unit_col


@implements("cross_entropy")
class LigerCrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, logits, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap,
        return_z_loss, in_place,
    ):  # fmt: skip
        check_args(
            logits, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap,
            return_z_loss, in_place,
        )  # fmt: skip
        n_valid, weight_sum = target_stats(logits, target, weight, ignore_index)
        opts = CEOptions(ignore_index, lse_square_scale, label_smoothing, reduction, softcap)
        logits2d = unit_col(logits)
        w_total = weight_total(weight, logits.shape[1])
        loss_rows, z_rows, lse = cross_entropy_forward(logits2d, target, weight, opts, w_total)
        loss, z = reduce_rows(loss_rows, z_rows, opts, n_valid, weight_sum)
        # In place: a detached alias, so the gradient returned in its memory is a tensor of its
        # own (never the input itself) that autograd can keep as .grad.
        ctx.save_for_backward(logits2d.detach() if in_place else logits2d, target, weight, lse)
        ctx.opts, ctx.w_total, ctx.scales = opts, w_total, opts.scales(n_valid, weight_sum)
        ctx.in_place = in_place
        if not return_z_loss:
            return loss.to(logits.dtype)
        z = z.to(logits.dtype)
        ctx.mark_non_differentiable(z)
        return loss.to(logits.dtype), z

    @staticmethod
    def backward(ctx, grad_loss, _grad_z=None):
        logits2d, target, weight, lse = ctx.saved_tensors
        grad_out = grad_loss.reshape(-1).contiguous()
        in_place = ctx.in_place and logits2d.is_contiguous()
        dx = logits2d if in_place else torch.empty_like(logits2d)
        cross_entropy_backward(logits2d, target, weight, lse, grad_out, dx, ctx.opts, ctx.w_total, *ctx.scales)
        if in_place:
            # The kernel overwrote the logits behind autograd's back: bump their version, so a node
            # that also saved them (a misuse of in_place) raises instead of reading a gradient.
            torch.autograd.graph.increment_version(dx)
        return dx, None, None, None, None, None, None, None, None, None
