"""Fused linear JSD (distillation) for Intel GPUs: the kernel adapter of
`liger_core.drivers.fused_linear_jsd` (which holds the autograd Function and its chunk loop): the
matmul steps of the fused linear losses (`fused_linear_grpo.LinearChunks`: for 16-bit inputs the
GEMM of _matmul.py, 16-bit tiles on the matrix engines with fp32 output, so no fp32 copy of either
weight), chunks of about FUSED_LINEAR_MEMORY_BUDGET logits, and the divergence kernels of
divergence.py (the chunk's loss sum, then the gradient in the student's log-probabilities, scaled
by the device scalar ``1 / counted rows``). The gradients are scaled in place in backward.
"""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.drivers import fused_linear_jsd as fused_linear_jsd_driver

from liger_ops_xpu.fused_linear_distillation import DistillationKernels


class FusedLinearJSDKernels(DistillationKernels):
    """`liger_core.drivers.fused_linear_jsd.FusedLinearJSDKernels` on `fused_linear_distillation`'s
    matmul steps, chunk plan and JSD rows."""

    protocol = fused_linear_jsd_driver.PROTOCOL

    def scale_grad(self, grad, upstream):
        return grad.mul_(upstream)  # in place: autograd adopts the buffer


LigerFusedLinearJSDFunction = implements("fused_linear_jsd")(
    fused_linear_jsd_driver.autograd_function(FusedLinearJSDKernels(), __name__)
)
