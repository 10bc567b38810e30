"""@triton.jit helpers shared by several op modules: one definition each, core ``tl`` only (no
libdevice), so the same code runs compiled and in the Triton interpreter."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def tanh(z):
    """tanh from one exp of a non-positive argument (no overflow), sign restored:
    sign(z) * (1 - e^{-2|z|}) / (1 + e^{-2|z|})."""
    e = tl.exp(-2.0 * tl.abs(z))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(z < 0, -t, t)


@triton.jit
def row_offset(row, row_stride):
    """``row * row_stride`` in int64: tokens x vocab passes 2**31 at LLM sizes (4096 x 128256
    fp32 logits already at row 16744)."""
    return row.to(tl.int64) * row_stride


@triton.jit
def online_lse_step(m, s, xm):
    """One step of a running (max, sum of exp) over axis 0 of ``xm`` (masked entries -inf): ``m``
    and ``s`` are scalars for a row, or vectors over a tile's trailing axis (tokens)."""
    m_new = tl.maximum(m, tl.max(xm, axis=0))
    # A block of -inf logits (masked vocabulary) keeps m at -inf: shift by 0, not by -inf (NaN).
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    s = s * tl.exp(m - shift) + tl.sum(tl.exp(xm - shift), axis=0)
    return m_new, s


@triton.jit
def row_tile(first_row, n_rows, BLOCK_M: tl.constexpr):
    """The BLOCK_M rows of a row tile from ``first_row``: ``(rows, row_mask, rows64)``, ``rows64``
    the rows in int64 as a column (``X + rows64 * x_row_stride``: the tile's row pointers; row x
    stride overflows int32 on large activations)."""
    rows = first_row + tl.arange(0, BLOCK_M)
    return rows, rows < n_rows, rows.to(tl.int64)[:, None]


@triton.jit
def row_group(rows_per_program, n_rows):
    """A program's run of ``rows_per_program`` consecutive rows (the last one clipped to
    ``n_rows``): ``(pid, row_start, row_end)``, ``pid`` the program's slot in the partials."""
    pid = tl.program_id(0)
    row_start = pid * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, n_rows)
    return pid, row_start, row_end


@triton.jit
def vocab_tile(n_cols, BLOCK_N: tl.constexpr):
    """A program's place on a (rows, vocabulary tiles) grid: ``(row, tile, cols, mask)``, the
    tile's BLOCK_N column offsets and their mask."""
    row = tl.program_id(0)
    tile = tl.program_id(1)
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    return row, tile, cols, cols < n_cols
