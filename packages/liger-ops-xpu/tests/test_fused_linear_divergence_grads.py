"""The shared check that fused_linear_kl_div's and fused_linear_jsd's gradients are handed to
autograd once (`liger_core.conformance.fused_grads`), against this package's backend."""

from liger_core.conformance.fused_grads import *
