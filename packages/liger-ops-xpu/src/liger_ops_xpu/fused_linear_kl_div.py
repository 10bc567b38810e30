"""Fused linear KL divergence for Intel GPUs: the kernel adapter of
`liger_core.drivers.fused_linear_kl_div` (which holds the autograd Function and its chunk loop):
fused_linear_jsd's matmul steps and chunk plan, and the divergence kernels of divergence.py (the
chunk's loss sum, then d(loss)/d(log-probs) ``= -target * scale``, ignored rows skipped).
"""

from __future__ import annotations

import torch
from liger_core.backend import implements
from liger_core.drivers import fused_linear_kl_div as fused_linear_kl_div_driver

from liger_ops_xpu.divergence import KL, Divergence, divergence_backward, divergence_forward
from liger_ops_xpu.fused_linear_jsd import FusedLinearJSDKernels


class FusedLinearKLDivKernels(FusedLinearJSDKernels):
    """`liger_core.drivers.fused_linear_kl_div.FusedLinearKLDivKernels` on fused_linear_jsd's
    matmul steps and the divergence kernels."""

    protocol = fused_linear_kl_div_driver.PROTOCOL

    def kl_div_rows(self, logp, target, labels, ignore_index, eps, scale, want_grad):
        div = Divergence(KL, eps=float(eps), ignore_index=ignore_index)
        total = divergence_forward(logp, target, labels, div, False)
        if not want_grad:
            return total, None
        ones = torch.ones(1, dtype=torch.float32, device=logp.device)
        return total, divergence_backward(logp, target, labels, div, ones, scale, torch.float32)


LigerFusedLinearKLDivFunction = implements("fused_linear_kl_div")(
    fused_linear_kl_div_driver.autograd_function(FusedLinearKLDivKernels(), __name__)
)
