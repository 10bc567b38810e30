"""liger-kernel's chunked distillation losses for Ascend NPUs, fused linear (fused_linear_cosine_similarity
and fused_linear_jsd_loss): liger-core's chunk loop (`liger_core.ops._distillation.autograd_functions`)
over this module's kernel adapter: the logits' and weight gradient's matmuls (`LinearChunks`: float32
torch matmuls on the cube units), token chunks whose logits are about as many elements as the whole
input (`_tiling.chunk_tokens`), the hard term through `_cross_entropy`'s kernels (loss rows, then its
gradient written over the student's logits), the JSD's soft term through `divergence`'s kernel. This
module registers the Functions.
"""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.ops import _distillation as D

from liger_ops_ascend import hardware
from liger_ops_ascend._cross_entropy import CEOptions, cross_entropy_backward, cross_entropy_forward, prepare_target
from liger_ops_ascend._tiling import chunk_tokens
from liger_ops_ascend.divergence import JSD, divergence_forward
from liger_ops_ascend.fused_linear_grpo import LinearChunks


class DistillationKernels(LinearChunks, D.DistillationKernels):
    """`_distillation.DistillationKernels` on the cross-entropy and divergence kernels."""

    def chunk_rows(self, n_rows, hidden, vocab):
        return chunk_tokens(n_rows, hidden, vocab, 8)  # student and teacher fp32 logits

    def hard_cross_entropy(self, ignore_index, upstream, device):
        ce = CEOptions(None, ignore_index, 0.0, 0.0, None)
        hw = hardware.current(device)

        def rows(logits, labels):
            target = prepare_target(labels)
            row_loss, _, lse = cross_entropy_forward(logits, target, ce, hw)
            if upstream is not None:
                up = upstream.expand(logits.shape[0]).contiguous()  # a per row; b (the z-loss factor) multiplies 0
                cross_entropy_backward(logits, target, lse, up, up, ce, hw, out=logits)
            return row_loss

        return rows

    def jsd_rows(self, x, y, labels, beta, ignore_index, coef):
        hw = hardware.current(x.device)
        total, d = divergence_forward(
            JSD, x, y, labels, ignore_index, 1.0, False, coef is not None, hw, param=float(beta)
        )
        if coef is not None:
            d.mul_(coef)
        return total, d


KERNELS = DistillationKernels()
FUNCTIONS = D.autograd_functions(KERNELS, __name__)

LigerFusedLinearCosineSimilarityFunction = implements("fused_linear_cosine_similarity")(
    FUNCTIONS["fused_linear_cosine_similarity"]
)
LigerFusedLinearJSDLossFunction = implements("fused_linear_jsd_loss")(FUNCTIONS["fused_linear_jsd_loss"])
