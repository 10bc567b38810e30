"""The shared check that the fused losses' forward-computed gradients (fused_linear_cross_entropy,
fused_linear_kl_div, fused_linear_jsd) are handed to autograd once
(`liger_core.conformance.fused_grads`), against this package's backend."""

from liger_core.conformance.fused_grads import *  # noqa: F403
