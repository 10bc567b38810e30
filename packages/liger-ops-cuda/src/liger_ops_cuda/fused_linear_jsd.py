"""Fused linear JSD for NVIDIA GPUs: the kernel adapter of `liger_core.drivers.fused_linear_jsd`
(which holds the autograd Function and its chunk loop): the matmul steps of the fused linear losses
(`fused_linear_grpo.LinearChunks`: float32-output GEMMs, the weight gradient accumulated in its
dtype, scaling skipped on the device at 1), token chunks within the
fused linear memory budget, and `divergence`'s JSD kernel for the loss partials and
d(loss)/d(student log-probs) (written over the teacher's buffer, scaled by the device scalar
``1 / counted rows``).
"""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.drivers import fused_linear_jsd as fused_linear_jsd_driver
from liger_ops_cuda._tiling import plan_chunks
from liger_ops_cuda.fused_linear_distillation import DistillationKernels


class FusedLinearJSDKernels(DistillationKernels):
    """`liger_core.drivers.fused_linear_jsd.FusedLinearJSDKernels` on `fused_linear_distillation`'s
    matmul steps and JSD rows."""

    protocol = fused_linear_jsd_driver.PROTOCOL

    def chunk_rows(self, n_rows, hidden, vocab):
        # Per row: student and teacher fp32 logits and the gradient in the input dtype, about 10 bytes a logit.
        return plan_chunks(n_rows, vocab, bytes_per_logit=10)


LigerFusedLinearJSDFunction = implements("fused_linear_jsd")(
    fused_linear_jsd_driver.autograd_function(FusedLinearJSDKernels(), __name__)
)
