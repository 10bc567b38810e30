"""Triton device functions shared by the kernels of several op modules, one definition each
(core ``tl`` only, so they run in every Triton's interpreter without a vendor libdevice)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def tanh(z):
    """tanh from exp(-2|z|): never overflows, saturates to +-1."""
    e = tl.exp(-2.0 * tl.abs(z))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(z < 0, -t, t)


@triton.jit
def row_tile(first_row, n_rows, BLOCK_M: tl.constexpr):
    """The BLOCK_M rows of a row tile from ``first_row``: ``(rows, row_mask, rows64)``, the last
    for pointer offsets (row x stride overflows int32 on large activations)."""
    rows = first_row + tl.arange(0, BLOCK_M)
    return rows, rows < n_rows, rows.to(tl.int64)
