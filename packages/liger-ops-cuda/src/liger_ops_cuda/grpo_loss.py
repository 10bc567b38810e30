"""grpo_loss for NVIDIA GPUs: the kernel adapter of `liger_core.drivers.grpo_loss` on
`_cross_entropy`'s row kernels (``-logp`` and lse per completion row; the gradient with a per-row
upstream, its two-entry scale vector built once per backward)."""

from __future__ import annotations

import torch

from liger_core.backend import implements
from liger_core.drivers import grpo_loss as grpo_loss_driver
from liger_core.ops.fused_linear_grpo import NO_IGNORED_ID
from liger_ops_cuda._cross_entropy import cross_entropy_backward, cross_entropy_forward


class GRPOLossKernels:
    """`liger_core.drivers.grpo_loss.GRPOLossKernels` on `_cross_entropy`'s kernels."""

    protocol = grpo_loss_driver.PROTOCOL

    def token_ids(self, ids):
        return ids

    def plan(self, device, backward):
        # Backward: [scale of the loss terms, of the z-loss terms]; the upstream carries the whole factor.
        return torch.tensor([1.0, 0.0], dtype=torch.float32, device=device) if backward else None

    def cross_entropy_rows(self, plan, logits, ids):
        rows = cross_entropy_forward(logits, ids, None, None, None, NO_IGNORED_ID, 0.0, 0.0, None, want_z=False)
        return rows.loss, rows.lse

    def cross_entropy_grad(self, plan, logits, ids, lse, upstream, out):
        cross_entropy_backward(logits, ids, None, None, None, lse, out, upstream, NO_IGNORED_ID, 0.0, 0.0, None, plan)


LigerGRPOLossFunction = implements("grpo_loss")(grpo_loss_driver.autograd_function(GRPOLossKernels(), __name__))
