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


@triton.jit
def row_group(tiles_per_program, BLOCK_M: tl.constexpr):
    """A program's run of ``tiles_per_program`` consecutive BLOCK_M-row tiles (a backward
    kernel's rows for one partial): ``(pid, first_row)``, ``pid`` the program's partial slot."""
    pid = tl.program_id(0)
    first_row = pid * tiles_per_program * BLOCK_M
    return pid, first_row


@triton.jit
def col_tile(block, n_cols, row_mask, BLOCK_N: tl.constexpr):
    """Column block ``block`` (BLOCK_N wide) of a row tile: the whole row for block 0 of a fused
    plan, one chunk of a wide row, or a 2-D grid's column block. Returns ``(cols, mask)``,
    ``mask`` the tile's elements in range."""
    cols = block * BLOCK_N + tl.arange(0, BLOCK_N)
    return cols, row_mask[:, None] & (cols < n_cols)[None, :]


@triton.jit
def zero_row(ROW, n_cols, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr):
    """Zeros over the ``n_cols`` elements of the row at ``ROW``, N_CHUNKS blocks of BLOCK_N: the
    gradient row of a token whose target is ignored."""
    cols = tl.arange(0, BLOCK_N)
    for chunk in range(N_CHUNKS):
        c = chunk * BLOCK_N + cols
        tl.store(ROW + c, tl.zeros((BLOCK_N,), tl.float32).to(ROW.dtype.element_ty), mask=c < n_cols)


@triton.jit
def add_to_partial(P, cols, n_cols, value):
    """Add ``value`` to columns ``cols`` (those < n_cols) of this program's own fp32 partial row
    ``P``: read, add, write back; no other program touches the row, so no atomics."""
    col_mask = cols < n_cols
    tl.store(P + cols, tl.load(P + cols, mask=col_mask, other=0.0) + value, mask=col_mask)
