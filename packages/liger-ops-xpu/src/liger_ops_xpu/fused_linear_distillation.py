"""liger-kernel's chunked distillation losses for Intel GPUs, fused linear (fused_linear_cosine_similarity
and fused_linear_jsd_loss): liger-core's chunk loop (`liger_core.ops._distillation.autograd_functions`)
over this module's kernel adapter: the logits' and weight gradient's matmuls (`LinearChunks`: for
16-bit inputs the GEMM of _matmul.py), token chunks of about ``hardware.FUSED_LINEAR_MEMORY_BUDGET``
float32 logits, the hard term through `_cross_entropy`'s kernels (loss rows, then its gradient written
over the student's logits), the JSD's soft term through `divergence`'s kernels. This module registers
the Functions.
"""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.ops import _distillation as D

from liger_ops_xpu._cross_entropy import CEOptions, cross_entropy_backward, cross_entropy_forward
from liger_ops_xpu._tiling import plan_chunks
from liger_ops_xpu.divergence import divergence_backward, divergence_forward, jsd_divergence
from liger_ops_xpu.fused_linear_grpo import LinearChunks


class DistillationKernels(LinearChunks, D.DistillationKernels):
    """`_distillation.DistillationKernels` on the cross-entropy and divergence kernels."""

    def chunk_rows(self, n_rows, hidden, vocab):
        return plan_chunks(n_rows, vocab, bytes_per_logit=8)  # student and teacher fp32 logits

    def hard_cross_entropy(self, ignore_index, upstream, device):
        ce = CEOptions(ignore_index, 0.0, 0.0, "none", None)

        def rows(logits, labels):
            vocab = float(logits.shape[1])
            row_loss, _, lse = cross_entropy_forward(logits, labels, None, ce, vocab)
            if upstream is not None:
                # Loss scale 1 (the upstream carries the whole factor), no z-loss; in place.
                cross_entropy_backward(logits, labels, None, lse, upstream, logits, ce, vocab, 1.0, 0.0)
            return row_loss

        return rows

    def jsd_rows(self, x, y, labels, beta, ignore_index, coef):
        div = jsd_divergence(float(beta), ignore_index)
        total = divergence_forward(x, y, labels, div, False)
        if coef is None:
            return total, None
        if isinstance(coef, torch.Tensor):  # a float32 (1,) device tensor (fused_linear_jsd): read on the device
            return total, divergence_backward(x, y, labels, div, coef, 1.0, torch.float32)
        ones = torch.ones(1, dtype=torch.float32, device=x.device)
        return total, divergence_backward(x, y, labels, div, ones, coef, torch.float32)


KERNELS = DistillationKernels()
FUNCTIONS = D.autograd_functions(KERNELS, __name__)

LigerFusedLinearCosineSimilarityFunction = implements("fused_linear_cosine_similarity")(
    FUNCTIONS["fused_linear_cosine_similarity"]
)
LigerFusedLinearJSDLossFunction = implements("fused_linear_jsd_loss")(FUNCTIONS["fused_linear_jsd_loss"])
