"""liger-kernel's chunked distillation losses for NVIDIA GPUs, fused linear (fused_linear_cosine_similarity
and fused_linear_jsd_loss): liger-core's chunk loop (`liger_core.ops._distillation.autograd_functions`)
over this module's kernel adapter: the logits' and weight gradient's matmuls (`LinearChunks`), token
chunks within the fused linear memory budget (`liger_core.memory_budget`), the hard term through
`_cross_entropy`'s kernels (loss rows, and its gradient written over the student's logits in the
same pass), the JSD's soft term through `divergence`'s kernel (its gradient written over the
teacher's log-probabilities). This module registers the Functions.
"""

from __future__ import annotations

import torch

from liger_core.backend import implements
from liger_core.ops import _distillation as D
from liger_ops_cuda._cross_entropy import cross_entropy_forward
from liger_ops_cuda._tiling import plan_chunks
from liger_ops_cuda.divergence import jsd_forward
from liger_ops_cuda.fused_linear_grpo import LinearChunks


class DistillationKernels(LinearChunks, D.DistillationKernels):
    """`_distillation.DistillationKernels` on the cross-entropy and divergence kernels."""

    def chunk_rows(self, n_rows, hidden, vocab):
        # Per row: the student's and teacher's fp32 logits (the gradient overwrites them): 8 bytes a logit.
        return plan_chunks(n_rows, vocab, bytes_per_logit=8)

    def hard_cross_entropy(self, ignore_index, upstream, device):
        # [loss, z-loss] scales: the upstream carries the whole factor, no z-loss.
        scales = None if upstream is None else torch.tensor([1.0, 0.0], dtype=torch.float32, device=device)

        def rows(logits, labels):
            return cross_entropy_forward(
                logits, labels, None, None, None, ignore_index, 0.0, 0.0, None,
                grad_out=logits if upstream is not None else None, upstream=upstream, scales=scales, want_z=False,
            ).loss  # fmt: skip

        return rows

    def jsd_rows(self, x, y, labels, beta, ignore_index, coef):
        # coef: a float (the distillation losses) or a float32 (1,) device tensor (fused_linear_jsd);
        # without it the kernel reads no scale (x stands in for the pointer).
        if coef is None or isinstance(coef, torch.Tensor):
            scale = x if coef is None else coef
        else:
            scale = torch.full((1,), coef, dtype=torch.float32, device=x.device)
        grad = y if coef is not None else None  # the kernel reads y's row before it writes over it
        part = jsd_forward(x, y, labels, beta, ignore_index, scale, grad=grad)
        return part.sum(), grad


KERNELS = DistillationKernels()
FUNCTIONS = D.autograd_functions(KERNELS, __name__)

LigerFusedLinearCosineSimilarityFunction = implements("fused_linear_cosine_similarity")(
    FUNCTIONS["fused_linear_cosine_similarity"]
)
LigerFusedLinearJSDLossFunction = implements("fused_linear_jsd_loss")(FUNCTIONS["fused_linear_jsd_loss"])
