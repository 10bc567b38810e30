"""Cross-entropy for Ascend NPUs (z-loss, label smoothing, class weights, softcap): the kernel
adapter of `liger_core.drivers.cross_entropy` over the row kernels of `_cross_entropy`, reduced
on the host.

The forward never modifies the logits. With ``in_place=True`` (the caller's opt-in) the
backward writes the gradient over them, so no logits-sized buffer is allocated in HBM;
strided logits (copied first: the gradient lands in the copy) and padded rows get a separate
buffer.
"""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.drivers import cross_entropy as cross_entropy_driver
from liger_core.ops.cross_entropy import target_stats

from liger_ops_ascend import hardware
from liger_ops_ascend._cross_entropy import (
    CEOptions,
    cross_entropy_backward,
    cross_entropy_forward,
    prepare_target,
    reduce_rows,
)
from liger_ops_ascend._tiling import as_rows


class CrossEntropyKernels:
    """`liger_core.drivers.cross_entropy.CrossEntropyKernels` on the row kernels of `_cross_entropy`."""

    protocol = cross_entropy_driver.PROTOCOL
    rows = staticmethod(as_rows)

    @staticmethod
    def forward(x, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap, return_z_loss):
        n_valid, weight_sum = target_stats(x, target, weight, ignore_index)
        hw = hardware.current(x.device)
        t = prepare_target(target)
        opts = CEOptions(weight, ignore_index, lse_square_scale, label_smoothing, softcap)
        loss_rows, z_rows, lse = cross_entropy_forward(x, t, opts, hw)
        loss, z, a, b = reduce_rows(loss_rows, z_rows, reduction, n_valid, weight_sum)
        z = z.to(x.dtype) if return_z_loss else None
        return loss.to(x.dtype), z, (t, lse), (opts, hw, (a, b), reduction)

    @staticmethod
    def backward(grad_loss, x, saved, state, out):
        t, lse = saved
        opts, hw, (a, b), reduction = state
        go = grad_loss.float()
        n_rows = x.shape[0]
        if reduction == "none":
            a_rows = b_rows = go.reshape(n_rows).contiguous()
        else:
            a_rows = (go * a).reshape(1).expand(n_rows).contiguous()
            b_rows = (go * b).reshape(1).expand(n_rows).contiguous()
        return cross_entropy_backward(x, t, lse, a_rows, b_rows, opts, hw, out=out)


LigerCrossEntropyFunction = implements("cross_entropy")(
    cross_entropy_driver.autograd_function(CrossEntropyKernels(), __name__)
)
