"""grpo_loss for Intel GPUs: `liger_core.drivers.grpo_loss` bound to `_cross_entropy`'s kernels
through `GRPOLossKernels` (one ``CEOptions`` for every call: no ignored id, no smoothing, no z-loss)."""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.drivers import grpo_loss as grpo_loss_driver
from liger_core.ops.fused_linear_grpo import NO_IGNORED_ID

from liger_ops_xpu._cross_entropy import CEOptions, cross_entropy_backward, cross_entropy_forward


class GRPOLossKernels:
    """`liger_core.drivers.grpo_loss.GRPOLossKernels` on `_cross_entropy`'s kernels."""

    protocol = grpo_loss_driver.PROTOCOL
    OPTIONS = CEOptions(NO_IGNORED_ID, 0.0, 0.0, "none", None)

    def token_ids(self, ids):
        return ids

    def plan(self, device, backward):
        return None

    def cross_entropy_rows(self, plan, logits, ids):
        row_loss, _, row_lse = cross_entropy_forward(logits, ids, None, self.OPTIONS, float(logits.shape[1]))
        return row_loss, row_lse

    def cross_entropy_grad(self, plan, logits, ids, lse, upstream, out):
        # Loss scale 1 (the upstream carries the whole factor), no z-loss.
        cross_entropy_backward(logits, ids, None, lse, upstream, out, self.OPTIONS, float(logits.shape[1]), 1.0, 0.0)


LigerGRPOLossFunction = implements("grpo_loss")(grpo_loss_driver.autograd_function(GRPOLossKernels(), __name__))
