"""Fused linear GRPO for NVIDIA GPUs: liger-core's chunked orchestration
(`liger_core.ops.fused_linear_grpo.autograd_functions`: whole sequences a chunk at a time, float32
logits within the fused linear memory budget, the loss from the shared formula) over this
module's kernel adapter: the logits' and weight gradient's matmuls (`LinearChunks`) and
`_cross_entropy`'s row kernels for the sampled tokens' ``-logp`` and, with the per-row upstream
``-dlogp / T``, the gradient written over the chunk's logits. This module registers the Function.
"""

from __future__ import annotations

import torch

from liger_core.backend import implements
from liger_core.memory_budget import logits_budget_elements
from liger_core.ops import _losses as L
from liger_core.ops import fused_linear_grpo as G
from liger_ops_cuda import hardware
from liger_ops_cuda._cross_entropy import cross_entropy_backward, cross_entropy_forward
from liger_ops_cuda._tiling import accumulate_weight_grad, logits_fp32, scale_unless_one


class LinearChunks(L.LinearChunkKernels):
    """The fused linear losses' matmul steps on NVIDIA GPUs: float32-output GEMMs for the logits,
    float32 accumulation of the weight gradient in its dtype, scaling skipped on device at 1."""

    def logits(self, x, weight):
        return logits_fp32(x, weight)

    def new_weight_grad(self, weight):
        return torch.empty_like(weight)  # the first chunk's product overwrites it

    def add_weight_grad(self, grad_weight, grad_logits, x, first):
        accumulate_weight_grad(grad_weight, grad_logits, x, first)

    def scale_grad(self, grad, upstream):
        scale_unless_one(grad, upstream.reshape(1))
        return grad


class GRPOKernels(LinearChunks, G.GRPOKernels):
    """`fused_linear_grpo.GRPOKernels` on the cross-entropy kernels."""

    def cross_entropy_rows(self, logits, ids):
        rows = cross_entropy_forward(logits, ids, None, None, None, G.NO_IGNORED_ID, 0.0, 0.0, None, want_z=False)
        return rows.loss, rows.lse

    def cross_entropy_grad(self, logits, ids, lse, upstream):
        # [scale of the loss terms, of the z-loss terms]: the upstream carries the whole factor.
        scales = torch.tensor([1.0, 0.0], dtype=torch.float32, device=logits.device)
        cross_entropy_backward(
            logits, ids, None, None, None, lse, logits, upstream, G.NO_IGNORED_ID, 0.0, 0.0, None, scales
        )


KERNELS = GRPOKernels()
FUNCTIONS = G.autograd_functions(
    KERNELS, lambda: logits_budget_elements(hardware.FUSED_LINEAR_MEMORY_BUDGET, 4), __name__
)

LigerFusedLinearGRPOFunction = implements("fused_linear_grpo")(FUNCTIONS["fused_linear_grpo"])
