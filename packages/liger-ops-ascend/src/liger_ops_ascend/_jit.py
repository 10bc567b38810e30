"""@triton.jit helpers shared by several op modules of this package: one definition each.

Only core ``tl`` functions, which both the NPU and the Triton interpreter provide (no
libdevice). A helper is inlined where it is called, so the kernels' arithmetic is what they
would compute written out.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def tanh(z):
    """``1 - 2 / (exp(2z) + 1)``: exact at both saturations (exp's overflow gives 1)."""
    return 1.0 - 2.0 / (tl.exp(2.0 * z) + 1.0)


@triton.jit
def online_lse_step(run_max, run_sum, x):
    """One chunk of an online logsumexp over the rows of ``x`` (masked entries -inf): the
    running max and sum of exponentials (relative to the max) after the chunk."""
    new_max = tl.maximum(run_max, tl.max(x, axis=1), propagate_nan=tl.PropagateNan.ALL)
    # Rows of a block past the end stay at -inf: keep their rescale finite.
    safe = tl.where(new_max == -float("inf"), 0.0, new_max)
    run_sum = run_sum * tl.exp(run_max - safe) + tl.sum(tl.exp(x - safe[:, None]), axis=1)
    return new_max, run_sum


@triton.jit
def row_block(blk, pid, n_rows, BLOCK_M: tl.constexpr):
    """``(row0, rows, row_mask)`` of row block ``blk`` of a grid-stride loop.

    ``pid * 0 + blk``: the interpreter's loop variable is a Python int, a tensor is needed.
    """
    row0 = (pid * 0 + blk) * BLOCK_M
    rows = row0 + tl.arange(0, BLOCK_M)
    return row0, rows, rows < n_rows


@triton.jit
def rows_or_zeros(P, rows, row_mask, LOAD: tl.constexpr, BLOCK_M: tl.constexpr):
    """A row block's fp32 values from ``P`` (one per row: an output's incoming gradient), or zeros
    without ``LOAD`` (that output feeds nothing). Padded rows are not filled: their results are
    masked off."""
    values = tl.zeros((BLOCK_M,), tl.float32)
    if LOAD:
        values = tl.load(P + rows, mask=row_mask, care_padding=False)
    return values


@triton.jit
def tile_ptrs(P, base, m_idx, row_stride, cols):
    """Pointers to rows ``base + m_idx`` x columns ``cols`` of a row-major tensor: ``base`` is an
    int64 scalar, the offsets inside the tile stay int32 (int64 vector arithmetic runs as
    scalar code on the vector cores)."""
    return P + base * row_stride + m_idx[:, None] * row_stride + cols[None, :]


@triton.jit
def tile_indices(BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``(pid, num_programs, m_idx, n_idx)`` of a grid-stride row kernel: this program, the
    grid's size, and the row and column indices inside a ``BLOCK_M x BLOCK_N`` tile."""
    return tl.program_id(0), tl.num_programs(0), tl.arange(0, BLOCK_M), tl.arange(0, BLOCK_N)


@triton.jit
def below(idx, limit):
    """``idx < limit`` for an int index vector and an int scalar, compared in fp32: A2/A3 have
    no int32/int64 vector compare (it runs as scalar code), an fp32 compare is one vector
    instruction. Exact: ``idx`` is a tile index (< 2**24), and a ``limit`` past 2**24 rounds to
    a float that is still past every such index."""
    return idx.to(tl.float32) < limit


@triton.jit
def col_tile(block, n_cols, row_mask, BLOCK_N: tl.constexpr):
    """Column chunk ``block`` (BLOCK_N wide) of a row tile whose rows are ``row_mask``: returns
    ``(cols, mask)``, ``mask`` the tile's elements in range (a load/store mask)."""
    cols = block * BLOCK_N + tl.arange(0, BLOCK_N)
    return cols, row_mask[:, None] & (cols < n_cols)[None, :]


@triton.jit
def flat_indices(BLOCK: tl.constexpr):
    """``(pid, num_programs, idx)`` of a grid-stride kernel over blocks of one axis (elementwise
    kernels, rotary's positions): this program, the grid's size and the indices inside a block of
    ``BLOCK``."""
    return tl.program_id(0), tl.num_programs(0), tl.arange(0, BLOCK)


@triton.jit
def flat_block(blk, pid, n, idx, BLOCK: tl.constexpr):
    """``(start, mask)`` of block ``blk`` of a grid-stride loop over ``n`` elements: its int64
    first element and a load/store mask (the compiler turns it into the DMA's length) whose bound
    is cast to int32, so the index is not widened to int64 (int64 vector arithmetic is scalar
    code). ``pid * 0 + blk``: the interpreter's loop variable is a Python int."""
    start = (pid * 0 + blk).to(tl.int64) * BLOCK
    return start, idx < tl.minimum(n - start, BLOCK).to(tl.int32)
