"""Fused linear KL divergence for Ascend NPUs: the kernel adapter of
`liger_core.drivers.fused_linear_kl_div` (which holds the autograd Function and its chunk loop):
fused_linear_jsd's matmul steps and chunk plan, and this package's divergence kernel (`divergence`:
the chunk's loss sum and d(loss)/d(log-probs) ``= -target * scale`` in one pass, ignored rows
skipped).
"""

from __future__ import annotations

from liger_core.backend import implements
from liger_core.drivers import fused_linear_kl_div as fused_linear_kl_div_driver

from liger_ops_ascend import hardware
from liger_ops_ascend.divergence import KL_DIV, divergence_forward
from liger_ops_ascend.fused_linear_jsd import FusedLinearJSDKernels


class FusedLinearKLDivKernels(FusedLinearJSDKernels):
    """`liger_core.drivers.fused_linear_kl_div.FusedLinearKLDivKernels` on fused_linear_jsd's
    matmul steps and the divergence kernel."""

    protocol = fused_linear_kl_div_driver.PROTOCOL

    def kl_div_rows(self, logp, target, labels, ignore_index, eps, scale, want_grad):
        hw = hardware.current(logp.device)
        return divergence_forward(
            KL_DIV, logp, target, labels, int(ignore_index), scale, False, want_grad, hw, param=float(eps)
        )


LigerFusedLinearKLDivFunction = implements("fused_linear_kl_div")(
    fused_linear_kl_div_driver.autograd_function(FusedLinearKLDivKernels(), __name__)
)
