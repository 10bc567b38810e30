"""Fused linear preference losses (fused_linear_dpo, _orpo, _cpo, _simpo, _kto) for Ascend NPUs:
the `_preference.TokenLogpKernels` adapter on `_cross_entropy`'s UB-tiled row kernels (targets
through `prepare_target`, the device's facts from `hardware.current`), under liger-core's
orchestration (`liger_core.ops._preference_functions`: one pass over chunks of whole pairs, at
most `hardware.PREFERENCE_CHUNK_ELEMENTS` logits a chunk unless a memory budget is set), whose
Functions this module registers.
"""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.memory_budget import logits_budget
from liger_core.ops._preference_functions import autograd_functions

from liger_ops_ascend import hardware
from liger_ops_ascend._cross_entropy import CEOptions, cross_entropy_backward, cross_entropy_forward, prepare_target


class TokenLogps:
    """`_preference.TokenLogpKernels` on the cross-entropy kernels."""

    def forward(self, logits, target, ignore_index):
        hw = hardware.current(logits.device)
        loss, _, lse = cross_entropy_forward(
            logits, prepare_target(target), CEOptions(None, ignore_index, 0.0, 0.0, None), hw
        )
        return loss.neg_(), lse

    def backward(self, logits, target, lse, coef, ignore_index):
        # Per-row loss factors -c_t; no z-loss (its factor multiplies 0).
        hw = hardware.current(logits.device)
        a_rows = coef.neg()
        opts = CEOptions(None, ignore_index, 0.0, 0.0, None)
        cross_entropy_backward(logits, prepare_target(target), lse, a_rows, a_rows, opts, hw, out=logits)


KERNELS = TokenLogps()
FUNCTIONS = autograd_functions(KERNELS, lambda: logits_budget(hardware.PREFERENCE_CHUNK_ELEMENTS, 4), __name__)

LigerFusedLinearDPOFunction = implements("fused_linear_dpo")(FUNCTIONS["fused_linear_dpo"])
LigerFusedLinearORPOFunction = implements("fused_linear_orpo")(FUNCTIONS["fused_linear_orpo"])
LigerFusedLinearCPOFunction = implements("fused_linear_cpo")(FUNCTIONS["fused_linear_cpo"])
LigerFusedLinearSimPOFunction = implements("fused_linear_simpo")(FUNCTIONS["fused_linear_simpo"])
LigerFusedLinearKTOFunction = implements("fused_linear_kto")(FUNCTIONS["fused_linear_kto"])
