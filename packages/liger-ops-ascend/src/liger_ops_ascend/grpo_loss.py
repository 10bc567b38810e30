"""grpo_loss for Ascend NPUs: `GRPOLossKernels`, the adapter that binds `liger_core.drivers.grpo_loss`
to `_cross_entropy`'s kernels (int32 token ids via `prepare_target`, the chip's `hardware` facts
read once per pass)."""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.drivers import grpo_loss as grpo_loss_driver
from liger_core.ops.fused_linear_grpo import NO_IGNORED_ID

from liger_ops_ascend import hardware
from liger_ops_ascend._cross_entropy import CEOptions, cross_entropy_backward, cross_entropy_forward, prepare_target


class GRPOLossKernels:
    """`liger_core.drivers.grpo_loss.GRPOLossKernels` on `_cross_entropy`'s kernels."""

    protocol = grpo_loss_driver.PROTOCOL
    OPTIONS = CEOptions(None, NO_IGNORED_ID, 0.0, 0.0, None)

    def token_ids(self, ids):
        return prepare_target(ids).contiguous()

    def plan(self, device, backward):
        return hardware.current(device)

    def cross_entropy_rows(self, plan, logits, ids):
        row_loss, _, row_lse = cross_entropy_forward(logits, ids, self.OPTIONS, plan)
        return row_loss, row_lse

    def cross_entropy_grad(self, plan, logits, ids, lse, upstream, out):
        # a = the upstream per row; b (the z-loss factor) multiplies 0 without a z-loss.
        cross_entropy_backward(logits, ids, lse, upstream, upstream, self.OPTIONS, plan, out=out)


LigerGRPOLossFunction = implements("grpo_loss")(grpo_loss_driver.autograd_function(GRPOLossKernels(), __name__))
