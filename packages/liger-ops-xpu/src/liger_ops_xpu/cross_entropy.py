"""Cross-entropy for Intel GPUs: the kernel adapter of `liger_core.drivers.cross_entropy` over
the row kernels of _cross_entropy.py.

The logits are never modified unless the caller passes ``in_place=True``: then the backward
writes the gradient over the logits (each block is read before the same program writes it)
instead of allocating a logits-sized buffer. Strided logits (copied first: the gradient lands
in the copy) and padded rows get a separate one.
"""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.drivers import cross_entropy as cross_entropy_driver
from liger_core.ops.cross_entropy import target_stats

from liger_ops_xpu._cross_entropy import (
    CEOptions,
    cross_entropy_backward,
    cross_entropy_forward,
    reduce_rows,
    weight_total,
)
from liger_ops_xpu._tiling import unit_col


class CrossEntropyKernels:
    """`liger_core.drivers.cross_entropy.CrossEntropyKernels` on the row kernels of _cross_entropy.py."""

    protocol = cross_entropy_driver.PROTOCOL
    rows = staticmethod(unit_col)

    @staticmethod
    def forward(x, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap, return_z_loss):
        n_valid, weight_sum = target_stats(x, target, weight, ignore_index)
        opts = CEOptions(ignore_index, lse_square_scale, label_smoothing, reduction, softcap)
        w_total = weight_total(weight, x.shape[1])
        loss_rows, z_rows, lse = cross_entropy_forward(x, target, weight, opts, w_total)
        loss, z = reduce_rows(loss_rows, z_rows, opts, n_valid, weight_sum)
        state = (opts, w_total, opts.scales(n_valid, weight_sum))
        return loss.to(x.dtype), z.to(x.dtype) if return_z_loss else None, (target, weight, lse), state

    @staticmethod
    def backward(grad_loss, x, saved, state, out):
        target, weight, lse = saved
        opts, w_total, scales = state
        dx = out if out is not None else torch.empty_like(x)
        cross_entropy_backward(x, target, weight, lse, grad_loss.reshape(-1), dx, opts, w_total, *scales)
        return dx


LigerCrossEntropyFunction = implements("cross_entropy")(
    cross_entropy_driver.autograd_function(CrossEntropyKernels(), __name__)
)
