"""Cross-entropy for Ascend NPUs (z-loss, label smoothing, class weights, softcap): the row
kernels of `_cross_entropy` on the logits, reduced on the host.

The forward never modifies the logits. With ``in_place=True`` (the caller's opt-in) the
backward writes the gradient over them, so no logits-sized buffer is allocated in HBM;
strided logits (copied first: the gradient lands in the copy) and padded rows get a separate
buffer.
"""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.ops.cross_entropy import check_args, target_stats

from liger_ops_ascend import hardware
from liger_ops_ascend._cross_entropy import (
    CEOptions,
    cross_entropy_backward,
    cross_entropy_forward,
    prepare_target,
    reduce_rows,
)
from liger_ops_ascend._tiling import as_rows


@implements("cross_entropy")
class LigerCrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, logits, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap, return_z_loss,
        in_place,
    ):  # fmt: skip
        check_args(
            logits, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap, return_z_loss,
            in_place,
        )  # fmt: skip
        n_valid, weight_sum = target_stats(logits, target, weight, ignore_index)
        hw = hardware.current(logits.device)
        x = as_rows(logits)
        t = prepare_target(target)
        opts = CEOptions(weight, ignore_index, lse_square_scale, label_smoothing, softcap)
        loss_rows, z_rows, lse = cross_entropy_forward(x, t, opts, hw)
        loss, z, a, b = reduce_rows(loss_rows, z_rows, reduction, n_valid, weight_sum)
        # In place: a detached alias, so the gradient returned in its memory is a tensor of its
        # own (never the input itself) that autograd can keep as .grad.
        ctx.save_for_backward(x.detach() if in_place else x, t, lse)
        ctx.opts, ctx.hw, ctx.scales, ctx.reduction = opts, hw, (a, b), reduction
        ctx.in_place = in_place
        if not return_z_loss:
            return loss.to(logits.dtype)
        z = z.to(logits.dtype)
        ctx.mark_non_differentiable(z)
        return loss.to(logits.dtype), z

    @staticmethod
    def backward(ctx, d_loss, *_dz):
        x, t, lse = ctx.saved_tensors
        a, b = ctx.scales
        go = d_loss.float()
        n_rows = x.shape[0]
        if ctx.reduction == "none":
            a_rows = b_rows = go.reshape(n_rows).contiguous()
        else:
            a_rows = (go * a).reshape(1).expand(n_rows).contiguous()
            b_rows = (go * b).reshape(1).expand(n_rows).contiguous()
        in_place = ctx.in_place and x.is_contiguous()
        dx = cross_entropy_backward(x, t, lse, a_rows, b_rows, ctx.opts, ctx.hw, out=x if in_place else None)
        if in_place:
            # The kernel overwrote the logits behind autograd's back: bump their version, so a node
            # that also saved them (a misuse of in_place) raises instead of reading a gradient.
            torch.autograd.graph.increment_version(dx)
        return dx, None, None, None, None, None, None, None, None, None
