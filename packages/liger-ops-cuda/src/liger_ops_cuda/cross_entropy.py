"""Cross-entropy for NVIDIA GPUs: the kernel adapter of `liger_core.drivers.cross_entropy` over
`_cross_entropy`'s kernels.

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
from liger_core.drivers import cross_entropy as cross_entropy_driver
from liger_ops_cuda._cross_entropy import (
    cross_entropy_backward,
    cross_entropy_forward,
    reduce_rows,
    target_stats,
)


class CrossEntropyKernels:
    """`liger_core.drivers.cross_entropy.CrossEntropyKernels` on `_cross_entropy`'s kernels."""

    protocol = cross_entropy_driver.PROTOCOL

    @staticmethod
    def rows(logits):
        # The kernels index rows by stride and columns by 1.
        return logits if logits.stride(-1) == 1 else logits.contiguous()

    @staticmethod
    def forward(x, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap, return_z_loss):
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
        loss, z = reduce_rows(rows, reduction, scales, x.dtype, z_out=return_z_loss)
        check.raise_if_bad()
        saved = (target, weight, weight_total, rows.lse, scales)
        return loss, z, saved, (ignore_index, lse_square_scale, label_smoothing, softcap)

    @staticmethod
    def backward(grad_loss, x, saved, state, out):
        target, weight, weight_total, lse, scales = saved
        ignore_index, lse_square_scale, label_smoothing, softcap = state
        grad = out if out is not None else torch.empty_like(x, memory_format=torch.contiguous_format)
        cross_entropy_backward(
            x, target, weight, weight_total, None, lse, grad, grad_loss, ignore_index,
            lse_square_scale, label_smoothing, softcap, scales,
        )  # fmt: skip
        return grad


LigerCrossEntropyFunction = implements("cross_entropy")(
    cross_entropy_driver.autograd_function(CrossEntropyKernels(), __name__)
)
