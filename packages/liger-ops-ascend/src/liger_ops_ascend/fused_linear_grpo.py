"""Fused linear GRPO for Ascend NPUs: liger-core's chunked orchestration
(`liger_core.ops.fused_linear_grpo.autograd_functions`: whole sequences a chunk at a time, at most
``hardware.FLGRPO_CHUNK_ELEMENTS`` float32 logits, the loss from the shared formula) over this
module's kernel adapter: the logits' and weight gradient's matmuls (`LinearChunks`) and
`_cross_entropy`'s row kernels for the sampled tokens' ``-logp`` and, with the per-row upstream
``-dlogp / T``, the gradient written over the chunk's logits. This module registers the Function.
"""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.memory_budget import logits_budget
from liger_core.ops import _losses as L
from liger_core.ops import fused_linear_grpo as G

from liger_ops_ascend import hardware
from liger_ops_ascend._cross_entropy import CEOptions, cross_entropy_backward, cross_entropy_forward, prepare_target


class LinearChunks(L.LinearChunkKernels):
    """The fused linear losses' matmul steps on Ascend NPUs: float32 products of the inputs (cube
    units, float32 operands, the weight upcast once), as fused_linear_jsd's."""

    def logits_weight(self, weight):
        return weight.float()

    def logits(self, x, weight):
        return x.float() @ weight.t()


class GRPOKernels(LinearChunks, G.GRPOKernels):
    """`fused_linear_grpo.GRPOKernels` on the cross-entropy kernels."""

    OPTIONS = CEOptions(None, G.NO_IGNORED_ID, 0.0, 0.0, None)

    def token_ids(self, ids):
        return prepare_target(ids)

    def cross_entropy_rows(self, logits, ids):
        row_loss, _, lse = cross_entropy_forward(logits, ids, self.OPTIONS, hardware.current(logits.device))
        return row_loss, lse

    def cross_entropy_grad(self, logits, ids, lse, upstream):
        # a = the upstream per row; b (the z-loss factor) multiplies 0 without a z-loss.
        hw = hardware.current(logits.device)
        cross_entropy_backward(logits, ids, lse, upstream, upstream, self.OPTIONS, hw, out=logits)


KERNELS = GRPOKernels()
FUNCTIONS = G.autograd_functions(KERNELS, lambda: logits_budget(hardware.FLGRPO_CHUNK_ELEMENTS, 4), __name__)

LigerFusedLinearGRPOFunction = implements("fused_linear_grpo")(FUNCTIONS["fused_linear_grpo"])
