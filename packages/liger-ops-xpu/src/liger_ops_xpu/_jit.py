"""Small Triton device functions shared by several kernels (core ``tl`` only, so they run in
every Triton's interpreter without a vendor libdevice)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def tanh(z):
    """tanh from exp(-2|z|): never overflows, saturates to +-1."""
    e = tl.exp(-2.0 * tl.abs(z))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(z < 0, -t, t)
