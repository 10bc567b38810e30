"""GroupNorm for Ascend NPUs: triton-ascend kernels, UB-aware tile plans and the kernel adapter of
`liger_core.drivers.group_norm`.

``x`` (batch, channels, *spatial) is read as ``batch * groups`` groups, each a contiguous
``(channels_per_group, spatial)`` block. The classic trap on Ascend is a grid of one
program per (batch, group): 65536 of them fail to launch. Here the grid is one program per
vector core, and two kernel pairs share the work:

- group rows (no spatial axis, e.g. a per-token norm over head groups): the groups of a sample
  are rows of ``channels_per_group`` elements, consecutive in memory, and a tile holds
  ``BLOCK_G`` of them (mean, centred variance, affine in one load each). Programs walk the
  (sample, group block) pairs, so the weight's offsets stay affine in the tile (no modulo).
  Used when such rows are 32-byte aligned and two fit a tile.
- one group at a time (everything else): a tile is ``BLOCK_C`` channels x ``BLOCK_S``
  spatial positions sized to the UB budget. When a whole group fits one tile the forward keeps
  it in the UB (mean, then the variance of the centred group); otherwise it loops over channel
  and spatial chunks with sums shifted by the group's first element, then normalises chunk by
  chunk. Each program walks the groups ``pid, pid + programs, ...``.

Backward: per group, the coefficients ``sum(g)`` and ``sum(g * x_hat)`` (``g = dy * weight``),
then grad_x (one load of the group when it fits a tile, else two passes over its chunks);
grad_weight and grad_bias are summed over each group's spatial positions into ``(batch,
channels)`` fp32 partials (every element written by one program, once) and reduced over the
batch afterwards: no atomics across cores.

Masks that feed arithmetic (the centring) are compared in fp32 (`_jit.below`); in-tile offsets
are int32 and bounded by the plan, chunk and group bases are int64 scalars.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import group_norm as group_norm_driver

from liger_ops_ascend import hardware
from liger_ops_ascend._jit import below, tile_indices
from liger_ops_ascend._tiling import FP32, dma, dtype_of, elem_bytes, mask, once, rows_f32, sum_partials, work
from liger_ops_ascend.launch import AscendLaunchError, KernelPlan, Tile, launch

# -- group rows (no spatial axis) ------------------------------------------------------------


@triton.jit
def _group_rows_block(blk, pid, n_gblocks, n_groups, group_size, BLOCK_G: tl.constexpr):
    """``(row0, base, g0, g_mask)`` of (sample, group block) ``blk``: the first group's row (an
    index into MEAN/RSTD), its element offset (int64), its index inside the sample (for the
    weight), and which of the block's groups exist."""
    blk_t = pid * 0 + blk  # a tensor: the interpreter's loop variable is a Python int
    sample = blk_t // n_gblocks
    g0 = (blk_t % n_gblocks) * BLOCK_G
    row0 = sample * n_groups + g0
    g_mask = tl.arange(0, BLOCK_G) < n_groups - g0
    return row0, row0.to(tl.int64) * group_size, g0, g_mask


@triton.jit
def _group_norm_rows_forward_kernel(
    X, W, B, Y, MEAN, RSTD, n_groups, group_size, n_blocks, n_gblocks, eps,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Groups of ``group_size`` channels (no spatial axis), ``BLOCK_G`` of them per tile."""
    pid, num_programs, g_idx, n_idx = tile_indices(BLOCK_G, BLOCK_N)
    col_mask = n_idx < group_size
    col_live = below(n_idx, group_size)
    tile = g_idx[:, None] * group_size + n_idx[None, :]
    for blk in range(pid, n_blocks, num_programs):
        row0, base, g0, g_mask = _group_rows_block(blk, pid, n_gblocks, n_groups, group_size, BLOCK_G)
        mask = g_mask[:, None] & col_mask[None, :]
        xf = tl.load(X + base + tile, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(xf, axis=1) / group_size
        xc = tl.where(col_live[None, :], xf - mean[:, None], 0.0)
        rstd = tl.math.rsqrt(tl.sum(xc * xc, axis=1) / group_size + eps)
        y = xc * rstd[:, None]
        # Channel = group * group_size + column: the weight tile has x's offsets, from the
        # sample's first channel. Its padded lanes only reach masked-off stores.
        if HAS_WEIGHT:
            y = y * tl.load(W + g0 * group_size + tile, mask=mask, care_padding=False).to(tl.float32)
        if HAS_BIAS:
            y = y + tl.load(B + g0 * group_size + tile, mask=mask, care_padding=False).to(tl.float32)
        tl.store(Y + base + tile, y.to(Y.dtype.element_ty), mask=mask)
        tl.store(MEAN + row0 + g_idx, mean, mask=g_mask)
        tl.store(RSTD + row0 + g_idx, rstd, mask=g_mask)


@triton.jit
def _group_norm_rows_backward_kernel(
    DY, X, W, MEAN, RSTD, DX, DW_PARTIAL, DB_PARTIAL, n_groups, group_size, n_blocks, n_gblocks,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Without a spatial axis each (sample, channel) partial is one element: dy * x_hat and dy,
    stored with x's offsets into the ``(batch, channels)`` partials."""
    pid, num_programs, g_idx, n_idx = tile_indices(BLOCK_G, BLOCK_N)
    col_mask = n_idx < group_size
    tile = g_idx[:, None] * group_size + n_idx[None, :]
    for blk in range(pid, n_blocks, num_programs):
        row0, base, g0, g_mask = _group_rows_block(blk, pid, n_gblocks, n_groups, group_size, BLOCK_G)
        mask = g_mask[:, None] & col_mask[None, :]
        xf = tl.load(X + base + tile, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + base + tile, mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(MEAN + row0 + g_idx, mask=g_mask, other=0.0)
        rstd = tl.load(RSTD + row0 + g_idx, mask=g_mask, other=0.0)
        # Padded columns: x_hat is not zero there, but dy is, so every product below is.
        x_hat = (xf - mean[:, None]) * rstd[:, None]
        if HAS_WEIGHT:
            tl.store(DW_PARTIAL + base + tile, dy * x_hat, mask=mask)
        if HAS_BIAS:
            tl.store(DB_PARTIAL + base + tile, dy, mask=mask)
        gr = dy
        if HAS_WEIGHT:
            gr = dy * tl.load(W + g0 * group_size + tile, mask=mask, other=0.0).to(tl.float32)
        c1 = tl.sum(gr, axis=1) / group_size
        c2 = tl.sum(gr * x_hat, axis=1) / group_size
        dx = (gr - c1[:, None] - x_hat * c2[:, None]) * rstd[:, None]
        tl.store(DX + base + tile, dx.to(DX.dtype.element_ty), mask=mask)


# -- one group at a time ---------------------------------------------------------------------


@triton.jit
def _live(c_idx, s_idx, c_left, s_left):
    """The (channel, spatial) tile's in-range mask for arithmetic, compared in fp32."""
    return below(c_idx, c_left)[:, None] & below(s_idx, s_left)[None, :]


@triton.jit
def _single_tile_masks(c_idx, s_idx, cpg, spatial):
    """``(ch_mask, tile_mask, live)`` of a group held in one (channel, spatial) tile: the
    channels' and the tile's load/store masks, and its in-range mask for arithmetic (fp32)."""
    ch_mask = c_idx < cpg
    return ch_mask, ch_mask[:, None] & (s_idx < spatial)[None, :], _live(c_idx, s_idx, cpg, spatial)


@triton.jit
def _group_row(row_i, pid, n_groups, group_size):
    """``(row, g, base)`` of group row ``row_i`` (sample * groups + g) of a grid-stride loop: the
    row as a tensor (the interpreter's loop variable is a Python int), its group inside the
    sample, and its first element's offset (int64)."""
    row = pid * 0 + row_i
    return row, row % n_groups, row.to(tl.int64) * group_size


@triton.jit
def _group_norm_forward_kernel(
    X,
    W,
    B,
    Y,
    MEAN,
    RSTD,
    n_rows,
    n_groups,
    cpg,
    spatial,
    n_c_chunks,
    n_s_chunks,
    eps,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_S: tl.constexpr,
    SINGLE_TILE: tl.constexpr,
):
    pid, num_programs, c_idx, s_idx = tile_indices(BLOCK_C, BLOCK_S)
    group_size = cpg * spatial
    tile = c_idx[:, None] * spatial + s_idx[None, :]
    if SINGLE_TILE:
        ch_mask, tile_mask, live = _single_tile_masks(c_idx, s_idx, cpg, spatial)
    for row_i in range(pid, n_rows, num_programs):
        row, g, base = _group_row(row_i, pid, n_groups, group_size)
        if SINGLE_TILE:
            xf = tl.load(X + base + tile, mask=tile_mask, other=0.0).to(tl.float32)
            mean = tl.sum(tl.sum(xf, axis=1), axis=0) / group_size
            xc = tl.where(live, xf - mean, 0.0)
            rstd = tl.math.rsqrt(tl.sum(tl.sum(xc * xc, axis=1), axis=0) / group_size + eps)
            y = xc * rstd
            # The parameters' padded channels only reach masked-off stores.
            if HAS_WEIGHT:
                y = y * tl.load(W + g * cpg + c_idx, mask=ch_mask, care_padding=False).to(tl.float32)[:, None]
            if HAS_BIAS:
                y = y + tl.load(B + g * cpg + c_idx, mask=ch_mask, care_padding=False).to(tl.float32)[:, None]
            tl.store(Y + base + tile, y.to(Y.dtype.element_ty), mask=tile_mask)
        else:
            shift = tl.load(X + base).to(tl.float32)
            # fp32 scalar accumulators (a literal 0.0 would change type inside the loop).
            s1 = shift * 0.0
            s2 = shift * 0.0
            for cc in range(n_c_chunks):
                c_base = base + (pid * 0 + cc * BLOCK_C).to(tl.int64) * spatial
                c_left = cpg - cc * BLOCK_C
                for sc in range(n_s_chunks):
                    s0 = sc * BLOCK_S
                    m = (c_idx < c_left)[:, None] & (s0 + s_idx < spatial)[None, :]
                    xf = tl.load(X + c_base + s0 + tile, mask=m, other=0.0).to(tl.float32)
                    d = tl.where(_live(c_idx, s_idx, c_left, spatial - s0), xf - shift, 0.0)
                    s1 += tl.sum(tl.sum(d, axis=1), axis=0)
                    s2 += tl.sum(tl.sum(d * d, axis=1), axis=0)
            m1 = s1 / group_size
            mean = shift + m1
            rstd = tl.math.rsqrt(tl.maximum(s2 / group_size - m1 * m1, 0.0, propagate_nan=tl.PropagateNan.ALL) + eps)
            for cc in range(n_c_chunks):
                c_base = base + (pid * 0 + cc * BLOCK_C).to(tl.int64) * spatial
                c_left = cpg - cc * BLOCK_C
                c_mask = c_idx < c_left
                if HAS_WEIGHT:
                    w = tl.load(W + g * cpg + cc * BLOCK_C + c_idx, mask=c_mask, care_padding=False).to(tl.float32)
                if HAS_BIAS:
                    b = tl.load(B + g * cpg + cc * BLOCK_C + c_idx, mask=c_mask, care_padding=False).to(tl.float32)
                for sc in range(n_s_chunks):
                    s0 = sc * BLOCK_S
                    m = c_mask[:, None] & (s0 + s_idx < spatial)[None, :]
                    xf = tl.load(X + c_base + s0 + tile, mask=m, care_padding=False).to(tl.float32)
                    y = (xf - mean) * rstd
                    if HAS_WEIGHT:
                        y = y * w[:, None]
                    if HAS_BIAS:
                        y = y + b[:, None]
                    tl.store(Y + c_base + s0 + tile, y.to(Y.dtype.element_ty), mask=m)
        tl.store(MEAN + row, mean)
        tl.store(RSTD + row, rstd)


@triton.jit
def _group_norm_backward_kernel(
    DY,
    X,
    W,
    MEAN,
    RSTD,
    DX,
    DW_PARTIAL,
    DB_PARTIAL,
    n_rows,
    n_groups,
    cpg,
    spatial,
    n_c_chunks,
    n_s_chunks,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_S: tl.constexpr,
    SINGLE_TILE: tl.constexpr,
):
    """Per group: pass 1 the two coefficients, pass 2 grad_x and the per-channel partials
    (group ``row`` = batch * groups + g owns partial elements ``row * cpg + channel``)."""
    pid, num_programs, c_idx, s_idx = tile_indices(BLOCK_C, BLOCK_S)
    group_size = cpg * spatial
    tile = c_idx[:, None] * spatial + s_idx[None, :]
    if SINGLE_TILE:
        ch_mask, tile_mask, live = _single_tile_masks(c_idx, s_idx, cpg, spatial)
    for row_i in range(pid, n_rows, num_programs):
        row, g, base = _group_row(row_i, pid, n_groups, group_size)
        mean = tl.load(MEAN + row)
        rstd = tl.load(RSTD + row)
        part = row.to(tl.int64) * cpg  # int64 scalar offset; the channel index stays int32
        if SINGLE_TILE:
            # The whole group is one tile: one load of x and dy, kept in the UB.
            xf = tl.load(X + base + tile, mask=tile_mask, other=0.0).to(tl.float32)
            dy = tl.load(DY + base + tile, mask=tile_mask, other=0.0).to(tl.float32)
            x_hat = tl.where(live, (xf - mean) * rstd, 0.0)
            if HAS_WEIGHT:
                tl.store(DW_PARTIAL + part + c_idx, tl.sum(dy * x_hat, axis=1), mask=ch_mask)
            if HAS_BIAS:
                tl.store(DB_PARTIAL + part + c_idx, tl.sum(dy, axis=1), mask=ch_mask)
            gr = dy
            if HAS_WEIGHT:
                gr = dy * tl.load(W + g * cpg + c_idx, mask=ch_mask, other=0.0).to(tl.float32)[:, None]
            c1 = tl.sum(tl.sum(gr, axis=1), axis=0) / group_size
            c2 = tl.sum(tl.sum(gr * x_hat, axis=1), axis=0) / group_size
            dx = (gr - c1 - x_hat * c2) * rstd
            tl.store(DX + base + tile, dx.to(DX.dtype.element_ty), mask=tile_mask)
        else:
            sum_g = mean * 0.0
            sum_gx = mean * 0.0
            for cc in range(n_c_chunks):
                c_base = base + (pid * 0 + cc * BLOCK_C).to(tl.int64) * spatial
                c_mask = c_idx < cpg - cc * BLOCK_C
                for sc in range(n_s_chunks):
                    s0 = sc * BLOCK_S
                    m = c_mask[:, None] & (s0 + s_idx < spatial)[None, :]
                    xf = tl.load(X + c_base + s0 + tile, mask=m, other=0.0).to(tl.float32)
                    gr = tl.load(DY + c_base + s0 + tile, mask=m, other=0.0).to(tl.float32)
                    if HAS_WEIGHT:
                        w = tl.load(W + g * cpg + cc * BLOCK_C + c_idx, mask=c_mask, other=0.0).to(tl.float32)
                        gr = gr * w[:, None]
                    sum_g += tl.sum(tl.sum(gr, axis=1), axis=0)
                    sum_gx += tl.sum(tl.sum(gr * (xf - mean), axis=1), axis=0)
            c1 = sum_g / group_size
            c2 = sum_gx * rstd / group_size
            for cc in range(n_c_chunks):
                c_base = base + (pid * 0 + cc * BLOCK_C).to(tl.int64) * spatial
                c_left = cpg - cc * BLOCK_C
                c_mask = c_idx < c_left
                if HAS_WEIGHT:
                    w = tl.load(W + g * cpg + cc * BLOCK_C + c_idx, mask=c_mask, care_padding=False).to(tl.float32)
                dw_acc = tl.zeros((BLOCK_C,), dtype=tl.float32)
                db_acc = tl.zeros((BLOCK_C,), dtype=tl.float32)
                for sc in range(n_s_chunks):
                    s0 = sc * BLOCK_S
                    m = c_mask[:, None] & (s0 + s_idx < spatial)[None, :]
                    xf = tl.load(X + c_base + s0 + tile, mask=m, other=0.0).to(tl.float32)
                    dy = tl.load(DY + c_base + s0 + tile, mask=m, other=0.0).to(tl.float32)
                    x_hat = tl.where(_live(c_idx, s_idx, c_left, spatial - s0), (xf - mean) * rstd, 0.0)
                    gr = dy
                    if HAS_WEIGHT:
                        gr = dy * w[:, None]
                    dx = (gr - c1 - x_hat * c2) * rstd
                    tl.store(DX + c_base + s0 + tile, dx.to(DX.dtype.element_ty), mask=m)
                    dw_acc += tl.sum(dy * x_hat, axis=1)
                    db_acc += tl.sum(dy, axis=1)
                if HAS_WEIGHT:
                    tl.store(DW_PARTIAL + part + cc * BLOCK_C + c_idx, dw_acc, mask=c_mask)
                if HAS_BIAS:
                    tl.store(DB_PARTIAL + part + cc * BLOCK_C + c_idx, db_acc, mask=c_mask)


# -- tile plans ------------------------------------------------------------------------------
#
# Tiles in the terms of the UB model (ub_model.md): m x n is BLOCK_G x BLOCK_N (group rows) or
# BLOCK_C x BLOCK_S (one group at a time).


def rows_forward_tiles(m: int, n: int, xb: int, wb: int, bb: int) -> tuple[Tile, ...]:
    tiles = dma("x", m, n, xb) + dma("y", m, n, xb) + dma("weight", m, n, wb) + dma("bias", m, n, bb)
    tiles += dma("mean", 1, m, FP32) + dma("rstd", 1, m, FP32)
    # Peak: x in fp32, x centred and its square (y then takes a dead buffer); a parameter in fp32.
    tiles += work("f32_", m, n, 3) + work("param_f32", m, n, 1 if (wb or bb) else 0)
    return tuple(tiles + once("col_live", 1, n, 1) + mask(m, n) + rows_f32(("mean_f32", "rstd_f32"), m))


def rows_backward_tiles(m: int, n: int, xb: int, wb: int, bb: int) -> tuple[Tile, ...]:
    tiles = dma("x", m, n, xb) + dma("dy", m, n, xb) + dma("dx", m, n, xb) + dma("weight", m, n, wb)
    tiles += dma("dw_partial", m, n, FP32 if wb else 0) + dma("db_partial", m, n, FP32 if bb else 0)
    tiles += dma("mean", 1, m, FP32) + dma("rstd", 1, m, FP32)
    # Peak: x and dy in fp32, x_hat, the weight in fp32, g and one product.
    tiles += work("f32_", m, n, 5 if wb else 4)
    return tuple(tiles + mask(m, n) + rows_f32(("mean_f32", "rstd_f32", "c1", "c2"), m))


def forward_tiles(m: int, n: int, xb: int, wb: int, bb: int) -> tuple[Tile, ...]:
    tiles = dma("x", m, n, xb) + dma("y", m, n, xb) + dma("weight", 1, m, wb) + dma("bias", 1, m, bb)
    # Peak: x in fp32, x centred and its square; the parameters in fp32.
    tiles += work("f32_", m, n, 3) + work("param_f32", 1, m, 2)
    # The centring's fp32 mask: its two index vectors in fp32 and the mask itself.
    tiles += work("index_f32", 1, m, 1) + work("index_f32", 1, n, 1) + work("live", m, n, 1, 1)
    return tuple(tiles + mask(m, n) + rows_f32(("row_sums",), m))


def backward_tiles(m: int, n: int, xb: int, wb: int, bb: int) -> tuple[Tile, ...]:
    tiles = dma("x", m, n, xb) + dma("dy", m, n, xb) + dma("dx", m, n, xb) + dma("weight", 1, m, wb)
    tiles += dma("dw_partial", 1, m, FP32) + dma("db_partial", 1, m, FP32)
    # Peak: x and dy in fp32, x_hat, g and one product; the weight in fp32.
    tiles += work("f32_", m, n, 5) + work("weight_f32", 1, m, 1)
    tiles += work("index_f32", 1, m, 1) + work("index_f32", 1, n, 1) + work("live", m, n, 1, 1)
    tiles += rows_f32(("dw_acc", "db_acc", "dw_rowsum", "db_rowsum", "row_sums"), m)
    return tuple(tiles + mask(m, n))


@dataclass(frozen=True)
class GroupNormPlan:
    """``group_rows``: BLOCK_G groups of a sample per tile (block_c is then BLOCK_G, block_s the
    row width BLOCK_N, and n_blocks the (sample, group block) pairs); else one group at a time."""

    group_rows: bool
    block_c: int
    block_s: int
    n_c_chunks: int
    n_s_chunks: int
    programs: int
    n_iters: int
    n_blocks: int
    n_gblocks: int
    kernels: tuple[KernelPlan, ...]

    @property
    def single_tile(self) -> bool:
        return self.n_c_chunks == 1 and self.n_s_chunks == 1


def _largest_fitting(tile_fns, m_cap: int, n: int, hw: hardware.Hardware) -> int:
    """Most rows (a power of two up to ``m_cap``, at least 1) whose tiles fit for every kernel."""
    m = 1
    while m * 2 <= m_cap and max(sum(t.nbytes for t in f(m * 2, n)) for f in tile_fns) <= hw.ub_budget:
        m *= 2
    return m


@functools.lru_cache(maxsize=1024)
def _plan_groups(
    batch: int,
    n_groups: int,
    cpg: int,
    spatial: int,
    xb: int,
    wb: int,
    bb: int,
    hw: hardware.Hardware,
    max_block_c: int,
    max_block_s: int,
) -> GroupNormPlan:
    n_rows = batch * n_groups
    min_n = max(hardware.min_block(b) for b in (xb, wb, bb) if b)
    group_size = cpg * spatial
    if spatial == 1:
        # Group rows: a tile of several groups, when their rows are 32-byte aligned in x, the
        # weight and the fp32 partials, and at least two fit.
        fns = tuple(functools.partial(f, xb=xb, wb=wb, bb=bb) for f in (rows_forward_tiles, rows_backward_tiles))
        block_n = max(min_n, triton.next_power_of_2(group_size))
        pitches = {group_size * b for b in (xb, wb, bb, FP32) if b}
        aligned = not any(p % hardware.ALIGN_BYTES for p in pitches)
        cap = min(max_block_c, triton.next_power_of_2(n_groups))
        fits = (2 * block_n * group_size <= hardware.INT32_MAX) and block_n <= max_block_s
        block_g = _largest_fitting(fns, cap, block_n, hw) if (aligned and fits) else 1
        if block_g > 1:
            n_gblocks = triton.cdiv(n_groups, block_g)
            n_blocks = batch * n_gblocks
            programs = min(hw.vector_cores, n_blocks)
            grid = (programs,)
            extent = block_g * group_size
            return GroupNormPlan(
                group_rows=True,
                block_c=block_g,
                block_s=block_n,
                n_c_chunks=1,
                n_s_chunks=1,
                programs=programs,
                n_iters=triton.cdiv(n_blocks, programs),
                n_blocks=n_blocks,
                n_gblocks=n_gblocks,
                kernels=tuple(
                    KernelPlan(name, grid, f(block_g, block_n), block_g, tuple(sorted(pitches)), extent)
                    for name, f in zip(("group_norm_forward_rows", "group_norm_backward_rows"), fns)
                ),
            )
    fwd = functools.partial(forward_tiles, xb=xb, wb=wb, bb=bb)
    bwd = functools.partial(backward_tiles, xb=xb, wb=wb, bb=bb)

    def need(m: int, n: int) -> int:
        return max(sum(t.nbytes for t in tiles(m, n)) for tiles in (fwd, bwd))

    block_s = max(min_n, min(triton.next_power_of_2(spatial), max_block_s))
    while block_s > min_n and need(1, block_s) > hw.ub_budget:
        block_s //= 2
    if need(1, block_s) > hw.ub_budget:
        raise AscendLaunchError(
            f"liger-ops-ascend group_norm: even a 1x{block_s} tile overflows; {hw.describe_budget()}"
        )
    # Several channels per tile over 32-byte aligned channel rows only (spatial is their pitch).
    aligned = not any(spatial * b % hardware.ALIGN_BYTES for b in (xb,))
    c_cap = min(max_block_c, triton.next_power_of_2(cpg)) if aligned else 1
    block_c = 1
    while (
        block_c * 2 <= c_cap
        and 2 * block_c * spatial <= hardware.INT32_MAX
        and need(block_c * 2, block_s) <= hw.ub_budget
    ):
        block_c *= 2
    programs = min(hw.vector_cores, max(n_rows, 1))
    grid = (programs,)
    extent = block_c * spatial + block_s
    return GroupNormPlan(
        group_rows=False,
        block_c=block_c,
        block_s=block_s,
        n_c_chunks=triton.cdiv(cpg, block_c),
        n_s_chunks=triton.cdiv(spatial, block_s),
        programs=programs,
        n_iters=triton.cdiv(max(n_rows, 1), programs),
        n_blocks=n_rows,
        n_gblocks=0,
        kernels=(
            KernelPlan("group_norm_forward", grid, fwd(block_c, block_s), block_c, (spatial * xb,), extent),
            KernelPlan("group_norm_backward", grid, bwd(block_c, block_s), block_c, (spatial * xb,), extent),
        ),
    )


def plan_groups(
    batch: int,
    channels: int,
    groups: int,
    spatial: int,
    x_dtype: torch.dtype,
    w_dtype: torch.dtype | None,
    b_dtype: torch.dtype | None,
    hw: hardware.Hardware,
) -> GroupNormPlan:
    """Tile plan (both directions) for ``batch * groups`` groups of ``channels // groups x spatial``."""
    return _plan_groups(
        batch,
        groups,
        channels // groups,
        max(spatial, 1),
        elem_bytes(x_dtype),
        elem_bytes(w_dtype),
        elem_bytes(b_dtype),
        hw,
        hardware.MAX_BLOCK_M,
        hardware.MAX_BLOCK_N,
    )


# -- host side -------------------------------------------------------------------------------


def group_norm_forward(
    xc: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    num_groups: int,
    eps: float,
    p: GroupNormPlan,
    hw: hardware.Hardware,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(y, mean, rstd)`` of contiguous ``(batch, channels, *spatial)`` input, per group."""
    batch, num_channels = xc.shape[:2]
    n_rows = batch * num_groups
    cpg = num_channels // num_groups
    y = torch.empty_like(xc)
    mean = torch.empty(n_rows, dtype=torch.float32, device=xc.device)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=xc.device)
    if not xc.numel():
        return y, mean, rstd
    w = xc if weight is None else weight
    b = xc if bias is None else bias
    flags = {"HAS_WEIGHT": weight is not None, "HAS_BIAS": bias is not None}
    if p.group_rows:
        launch(
            _group_norm_rows_forward_kernel, p.kernels[0], hw, xc, w, b, y, mean, rstd, num_groups, cpg, p.n_blocks,
            p.n_gblocks, eps, BLOCK_G=p.block_c, BLOCK_N=p.block_s, **flags,
        )  # fmt: skip
    else:
        launch(
            _group_norm_forward_kernel, p.kernels[0], hw, xc, w, b, y, mean, rstd, n_rows, num_groups, cpg,
            xc[0, 0].numel(), p.n_c_chunks, p.n_s_chunks, eps, BLOCK_C=p.block_c, BLOCK_S=p.block_s,
            SINGLE_TILE=p.single_tile, **flags,
        )  # fmt: skip
    return y, mean, rstd


def group_norm_backward(
    dyc: torch.Tensor,
    xc: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    num_groups: int,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    dx: torch.Tensor,
    p: GroupNormPlan,
    hw: hardware.Hardware,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """grad_x into ``dx`` (contiguous like ``xc``); returns ``(grad_weight, grad_bias)``;
    ``dyc`` contiguous like ``xc``."""
    batch, num_channels = xc.shape[:2]
    cpg = num_channels // num_groups
    has_w, has_b = weight is not None, bias is not None
    part = (batch, num_channels)
    # Every partial element is written by the kernel (zeros where a group is empty).
    dw_part = torch.zeros(part, dtype=torch.float32, device=xc.device) if has_w else rstd
    db_part = torch.zeros(part, dtype=torch.float32, device=xc.device) if has_b else rstd
    if xc.numel():
        w = xc if weight is None else weight
        flags = {"HAS_WEIGHT": has_w, "HAS_BIAS": has_b}
        if p.group_rows:
            launch(
                _group_norm_rows_backward_kernel, p.kernels[1], hw, dyc, xc, w, mean, rstd, dx, dw_part, db_part,
                num_groups, cpg, p.n_blocks, p.n_gblocks, BLOCK_G=p.block_c, BLOCK_N=p.block_s, **flags,
            )  # fmt: skip
        else:
            launch(
                _group_norm_backward_kernel, p.kernels[1], hw, dyc, xc, w, mean, rstd, dx, dw_part, db_part,
                batch * num_groups, num_groups, cpg, xc[0, 0].numel(), p.n_c_chunks, p.n_s_chunks,
                BLOCK_C=p.block_c, BLOCK_S=p.block_s, SINGLE_TILE=p.single_tile, **flags,
            )  # fmt: skip
    # Second stage: the per-sample partials summed over the batch.
    dw = sum_partials(dw_part, weight.dtype) if has_w else None
    db = sum_partials(db_part, bias.dtype) if has_b else None
    return dw, db


class GroupNormKernels:
    """`liger_core.drivers.group_norm.GroupNormKernels` on this module's kernels; the forward's
    UB plan and the device's facts (`hardware.current`) are the backward's ``state``."""

    protocol = group_norm_driver.PROTOCOL

    @staticmethod
    def forward(x3, weight, bias, num_groups, eps):
        hw = hardware.current(x3.device)
        batch, channels, spatial = x3.shape
        p = plan_groups(batch, channels, num_groups, spatial, x3.dtype, dtype_of(weight), dtype_of(bias), hw)
        y, mean, rstd = group_norm_forward(x3, weight, bias, num_groups, eps, p, hw)
        return y, mean, rstd, (p, hw)

    @staticmethod
    def backward(dy3, x3, weight, bias, num_groups, mean, rstd, dx, need_dw, need_db, state):
        p, hw = state
        return group_norm_backward(dy3, x3, weight, bias, num_groups, mean, rstd, dx, p, hw)


LigerGroupNormFunction = implements("group_norm")(group_norm_driver.autograd_function(GroupNormKernels(), __name__))
