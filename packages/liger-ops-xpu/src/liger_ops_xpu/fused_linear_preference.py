"""Fused linear preference losses (fused_linear_dpo, _orpo, _cpo, _simpo, _kto) for Intel GPUs:
`TokenLogps`, the per-token kernel pair that liger-core's chunked orchestration
(`liger_core.ops._preference_functions`, whose Functions this module registers) runs over each
chunk of whole pairs: `_cross_entropy`'s row kernels, forward in "sum" mode without z-loss or
smoothing, backward with each row's ``-c_t`` as its upstream and unit reduction scales.
"""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.memory_budget import logits_budget_elements
from liger_core.ops._preference_functions import autograd_functions

from liger_ops_xpu import hardware
from liger_ops_xpu._cross_entropy import CEOptions, cross_entropy_backward, cross_entropy_forward


class TokenLogps:
    """`_preference.TokenLogpKernels` on the cross-entropy kernels."""

    def forward(self, logits, target, ignore_index):
        opts = CEOptions(ignore_index, 0.0, 0.0, "sum", None)
        loss, _, lse = cross_entropy_forward(logits, target, None, opts, float(logits.shape[1]))
        return loss.neg_(), lse

    def backward(self, logits, target, lse, coef, ignore_index):
        # Per-row upstream -c_t, unit reduction scales: the coefficients hold the pair formula's derivative.
        opts = CEOptions(ignore_index, 0.0, 0.0, "sum", None)
        cross_entropy_backward(logits, target, None, lse, coef.neg(), logits, opts, float(logits.shape[1]), 1.0, 1.0)


KERNELS = TokenLogps()
FUNCTIONS = autograd_functions(
    KERNELS, lambda: logits_budget_elements(hardware.FUSED_LINEAR_MEMORY_BUDGET, 4), __name__
)

LigerFusedLinearDPOFunction = implements("fused_linear_dpo")(FUNCTIONS["fused_linear_dpo"])
LigerFusedLinearORPOFunction = implements("fused_linear_orpo")(FUNCTIONS["fused_linear_orpo"])
LigerFusedLinearCPOFunction = implements("fused_linear_cpo")(FUNCTIONS["fused_linear_cpo"])
LigerFusedLinearSimPOFunction = implements("fused_linear_simpo")(FUNCTIONS["fused_linear_simpo"])
LigerFusedLinearKTOFunction = implements("fused_linear_kto")(FUNCTIONS["fused_linear_kto"])
