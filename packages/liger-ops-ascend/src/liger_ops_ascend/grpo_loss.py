"""The GRPO loss from logits for Ascend NPUs: the kernels and the kernel adapter of
`liger_core.drivers.grpo_loss` (which holds the autograd Function): `_cross_entropy`'s kernels
give each completion's log-probabilities (``-loss`` of its rows) and their lse, and in backward
the logits' gradient with a per-row upstream; the loss between them is liger-core's shared
formula (`grpo_loss.outputs_from_logps`, TRL's terms).
"""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.drivers import grpo_loss as grpo_loss_driver

from liger_ops_ascend import hardware
from liger_ops_ascend._cross_entropy import CEOptions, cross_entropy_backward, cross_entropy_forward, prepare_target

# The kernels' ignore_index: never a token id (every id is checked to be in [0, vocab)).
NO_IGNORED_ID = -1


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
