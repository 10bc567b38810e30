"""Fused linear KL divergence for NVIDIA GPUs: the kernel adapter of
`liger_core.drivers.fused_linear_kl_div` (which holds the autograd Function and its chunk loop):
fused_linear_jsd's matmul steps and chunk plan, and `divergence`'s kl_div kernel for the loss
partials and d(loss)/d(log-probs) ``= -target * scale`` in one pass. Ignored rows get a zero
target (no loss, no gradient).
"""

from __future__ import annotations

import torch

from liger_core.backend import implements
from liger_core.drivers import fused_linear_kl_div as fused_linear_kl_div_driver
from liger_ops_cuda.divergence import kl_div_forward
from liger_ops_cuda.fused_linear_jsd import FusedLinearJSDKernels


class FusedLinearKLDivKernels(FusedLinearJSDKernels):
    """`liger_core.drivers.fused_linear_kl_div.FusedLinearKLDivKernels` on fused_linear_jsd's
    matmul steps and `divergence`'s kl_div kernel."""

    protocol = fused_linear_kl_div_driver.PROTOCOL

    def kl_div_rows(self, logp, target, labels, ignore_index, eps, scale, want_grad):
        if labels is not None:
            zero = torch.zeros((), dtype=target.dtype, device=target.device)
            target = torch.where((labels != ignore_index)[:, None], target, zero)
        part, grad = kl_div_forward(logp, target, False, False, eps, scale, want_grad)
        return part.sum(), grad


LigerFusedLinearKLDivFunction = implements("fused_linear_kl_div")(
    fused_linear_kl_div_driver.autograd_function(FusedLinearKLDivKernels(), __name__)
)
