"""Fused linear preference losses (fused_linear_dpo, _orpo, _cpo, _simpo, _kto) for NVIDIA GPUs:
`TokenLogps`, the kernel adapter (`liger_core.ops._preference.TokenLogpKernels`) that liger-core's
chunked orchestration runs on, here `_cross_entropy`'s kernels; the Functions are built by
`liger_core.ops._preference_functions.autograd_functions` and registered here under their public
names. Chunks of whole pairs are sized by `hardware.FUSED_LINEAR_MEMORY_BUDGET` (fp32 logits);
the gradient is scaled by the incoming one on the device (`scale_in_place`, no host sync).
"""

from __future__ import annotations

import torch

from liger_core.backend import implements
from liger_core.memory_budget import logits_budget_elements
from liger_core.ops._preference_functions import autograd_functions
from liger_ops_cuda import hardware
from liger_ops_cuda._cross_entropy import cross_entropy_backward, cross_entropy_forward
from liger_ops_cuda._tiling import scale_unless_one


class TokenLogps:
    """`_preference.TokenLogpKernels` on the cross-entropy kernels."""

    def forward(self, logits, target, ignore_index):
        rows = cross_entropy_forward(logits, target, None, None, None, ignore_index, 0.0, 0.0, None, want_z=False)
        return rows.loss.neg_(), rows.lse

    def backward(self, logits, target, lse, coef, ignore_index):
        # Unit reduction scales: the coefficients already hold the pair formula's derivative.
        scales = torch.ones(2, dtype=torch.float32, device=logits.device)
        cross_entropy_backward(
            logits, target, None, None, None, lse, logits, coef.neg(), ignore_index, 0.0, 0.0, None, scales
        )

    def scale_in_place(self, grad, upstream):
        scale_unless_one(grad, upstream)


KERNELS = TokenLogps()
FUNCTIONS = autograd_functions(
    KERNELS, lambda: logits_budget_elements(hardware.FUSED_LINEAR_MEMORY_BUDGET, 4), __name__
)

LigerFusedLinearDPOFunction = implements("fused_linear_dpo")(FUNCTIONS["fused_linear_dpo"])
LigerFusedLinearORPOFunction = implements("fused_linear_orpo")(FUNCTIONS["fused_linear_orpo"])
LigerFusedLinearCPOFunction = implements("fused_linear_cpo")(FUNCTIONS["fused_linear_cpo"])
LigerFusedLinearSimPOFunction = implements("fused_linear_simpo")(FUNCTIONS["fused_linear_simpo"])
LigerFusedLinearKTOFunction = implements("fused_linear_kto")(FUNCTIONS["fused_linear_kto"])
