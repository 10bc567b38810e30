"""Fused linear + JSD (distillation) for Ascend NPUs: the kernel adapter of
`liger_core.drivers.fused_linear_jsd` (which holds the autograd Function and its chunk loop): the
matmul steps of the fused linear losses (`fused_linear_grpo.LinearChunks`: float32 torch matmuls on
the cube units, the weight upcast once), token chunks whose logits are about as many elements as
the whole input (`_tiling.chunk_tokens`), and this package's divergence kernel (`divergence`,
vector cores, UB-sized vocabulary chunks: the chunk's JSD sum and its gradient w.r.t. the student
log-probabilities in one pass). The weight gradient accumulates in float32; both gradients are
scaled in place in backward.
"""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.drivers import fused_linear_jsd as fused_linear_jsd_driver

from liger_ops_ascend.fused_linear_distillation import DistillationKernels


class FusedLinearJSDKernels(DistillationKernels):
    """`liger_core.drivers.fused_linear_jsd.FusedLinearJSDKernels` on `fused_linear_distillation`'s
    matmul steps, chunk plan and JSD rows, the weight gradient in float32."""

    protocol = fused_linear_jsd_driver.PROTOCOL

    def new_weight_grad(self, weight):
        return torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)

    def scale_grad(self, grad, upstream):
        return grad.mul_(upstream)  # in place: autograd adopts the buffer (the driver casts grad_weight)


LigerFusedLinearJSDFunction = implements("fused_linear_jsd")(
    fused_linear_jsd_driver.autograd_function(FusedLinearJSDKernels(), __name__)
)
