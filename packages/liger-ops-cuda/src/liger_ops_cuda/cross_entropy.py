"""Cross-entropy for NVIDIA GPUs: the autograd Function over `_cross_entropy`'s kernels.

Forward reads the logits once (per-tile online-softmax partials, then per-row loss terms) and
saves only the per-row fp32 ``lse``. Backward reads them once more and writes the gradient
once, scaled by the incoming gradient read on the device (no host synchronisation). The
caller's logits are never written unless it passes ``in_place=True``: then the backward writes
the gradient over the logits (each tile is read before it is written, by the same program), so
no logits-sized buffer is allocated. Strided logits (copied to a contiguous buffer first: the
gradient lands in that copy) and rows with padding get a separate buffer instead.
No host synchronisation: the mean's denominators stay on the device and the target check
reads its count only after the main kernels are queued (`TargetCheck`).

Memory beyond the inputs: the per-row fp32 loss and lse (z-loss only when
``lse_square_scale > 0`` or it is returned with reduction "none"), one 4-float statistics
buffer, a few scalars; with many rows no (rows, tiles) partials (see `_cross_entropy`).
"""

from __future__ import annotations

import torch

from liger_core.backend import implements
from liger_core.ops.cross_entropy import check_args
from liger_ops_cuda._cross_entropy import (
    cross_entropy_backward,
    cross_entropy_forward,
    loss_outputs,
    reduce_rows,
    target_stats,
)
from liger_ops_cuda._tiling import contiguous


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
        x = logits if logits.stride(-1) == 1 else logits.contiguous()
        target = target.contiguous()
        weight = contiguous(weight)
        # Smoothing's sum_j w_j comes with the scales (same launch), kept on the device.
        scales, weight_total, check = target_stats(
            "cross_entropy", target, ignore_index, x.shape[1], weight, reduction, weight_total=label_smoothing > 0
        )
        # No z buffer without a z-loss: reduce_rows gives zeros (a real vector only if returned).
        want_z = lse_square_scale > 0
        rows = cross_entropy_forward(
            x, target, weight, weight_total, None, ignore_index, lse_square_scale, label_smoothing, softcap,
            want_z=want_z,
        )  # fmt: skip
        loss, z = reduce_rows(rows, reduction, scales, logits.dtype, z_out=return_z_loss)
        check.raise_if_bad()
        # In place: a detached alias, so the gradient returned in its memory is a tensor of its own
        # that autograd can keep as .grad without a copy.
        ctx.save_for_backward(x.detach() if in_place else x, target, weight, weight_total, rows.lse, scales)
        ctx.args = (ignore_index, lse_square_scale, label_smoothing, softcap, in_place)
        return loss_outputs(ctx, loss, z, return_z_loss)

    @staticmethod
    def backward(ctx, grad_loss, grad_z=None):
        if grad_loss is None:
            return (None,) * 10
        x, target, weight, weight_total, lse, scales = ctx.saved_tensors
        ignore_index, lse_square_scale, label_smoothing, softcap, in_place = ctx.args
        # in_place (the caller's opt-in, never the default): the gradient overwrites the logits.
        grad = x if in_place and x.is_contiguous() else torch.empty_like(x, memory_format=torch.contiguous_format)
        up = grad_loss.contiguous()
        cross_entropy_backward(
            x, target, weight, weight_total, None, lse, grad, up, ignore_index,
            lse_square_scale, label_smoothing, softcap, scales,
        )  # fmt: skip
        if grad is x:
            # The kernel overwrote the logits behind autograd's back: bump their version, so a node
            # that also saved them (a misuse of in_place) raises instead of reading a gradient.
            torch.autograd.graph.increment_version(x)
        return (grad,) + (None,) * 9
