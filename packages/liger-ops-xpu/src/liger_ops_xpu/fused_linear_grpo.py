"""Fused linear GRPO for Intel GPUs: liger-core's chunked orchestration
(`liger_core.ops.fused_linear_grpo.autograd_functions`: whole sequences a chunk at a time, float32
logits within the fused linear memory budget, the loss from the shared formula) over this
module's kernel adapter: the logits' and weight gradient's matmuls (`LinearChunks`) and
`_cross_entropy`'s row kernels for the sampled tokens' ``-logp`` and, with the per-row upstream
``-dlogp / T``, the gradient written over the chunk's logits. This module registers the Function.
"""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.memory_budget import logits_budget_elements
from liger_core.ops import _losses as L
from liger_core.ops import fused_linear_grpo as G

from liger_ops_xpu import hardware
from liger_ops_xpu._cross_entropy import CEOptions, cross_entropy_backward, cross_entropy_forward
from liger_ops_xpu._matmul import matmul_nt_f32


class LinearChunks(L.LinearChunkKernels):
    """The fused linear losses' matmul steps on Intel GPUs: the float32-output GEMM of _matmul.py."""

    def logits(self, x, weight):
        return matmul_nt_f32(x, weight)


class GRPOKernels(LinearChunks, G.GRPOKernels):
    """`fused_linear_grpo.GRPOKernels` on the cross-entropy kernels."""

    OPTIONS = CEOptions(G.NO_IGNORED_ID, 0.0, 0.0, "none", None)

    def cross_entropy_rows(self, logits, ids):
        row_loss, _, lse = cross_entropy_forward(logits, ids, None, self.OPTIONS, float(logits.shape[1]))
        return row_loss, lse

    def cross_entropy_grad(self, logits, ids, lse, upstream):
        # Loss scale 1 (the upstream carries the whole factor), no z-loss.
        vocab = float(logits.shape[1])
        cross_entropy_backward(logits, ids, None, lse, upstream, logits, self.OPTIONS, vocab, 1.0, 0.0)


KERNELS = GRPOKernels()
FUNCTIONS = G.autograd_functions(
    KERNELS, lambda: logits_budget_elements(hardware.FUSED_LINEAR_MEMORY_BUDGET, 4), __name__
)

LigerFusedLinearGRPOFunction = implements("fused_linear_grpo")(FUNCTIONS["fused_linear_grpo"])
