"""GroupNorm for NVIDIA GPUs: Triton kernels, launch plans and the kernel adapter of
`liger_core.drivers.group_norm`.

A (batch, group) is a (channels-per-group, spatial) array of the contiguous input, walked
in (BLOCK_C, BLOCK_HW) tiles. Two plans:

- split (few groups or large ones): each group is cut into chunks (a channel block x a
  spatial span) spread over several programs. Phase 1 writes each chunk's count, mean and
  M2 (sums shifted by the chunk's first-tile mean, so no E[x^2] - E[x]^2 cancellation);
  phase 2 combines a group's chunks (Chan's parallel formula) and normalises its chunk.
  Phase 2 walks the grid in reverse so the data phase 1 read last is still in L2 when it is
  read again. The backward has the same two phases (chunk sums of g * x_hat and g, then
  grad_x). Sums are kept per lane across tiles and reduced once per chunk.
- fused (many groups): one program per group makes both passes, the second over data it
  has just read (L2 hits), so x crosses HBM once per pass direction.

grad_weight / grad_bias: each chunk writes its channels' fp32 sums into a (batch x spans,
2 * channels) partial array (each cell written by exactly one program), summed in one launch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.drivers import group_norm as group_norm_driver
from liger_ops_cuda import hardware
from liger_ops_cuda._tiling import sum_partials


@triton.jit
def _group_norm_chunk_stats(
    X_g, c_lo, n_cb, hw_lo, hw_hi, Cg, HW, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr, EVICT: tl.constexpr
):
    # (count, mean, M2) of channels [c_lo, c_lo + n_cb * BLOCK_C) x spatial [hw_lo, hw_hi).
    # Sums of x - K and (x - K)^2 with K the mean of the chunk's first tile (close to the
    # chunk's mean, so M2 = S2 - S1^2 / n does not cancel), kept per lane across tiles and
    # reduced once at the end: the loop is loads and FMAs only, no block-wide reductions.
    # EVICT: "evict_last" where a second pass over the data follows.
    c0 = c_lo + tl.arange(0, BLOCK_C)
    h0 = hw_lo + tl.arange(0, BLOCK_HW)
    mask0 = (c0 < Cg)[:, None] & (h0 < hw_hi)[None, :]
    x0 = tl.load(X_g + c0[:, None] * HW + h0[None, :], mask=mask0, other=0.0).to(tl.float32)
    shift = tl.sum(tl.sum(x0, axis=1), axis=0) / tl.maximum(tl.sum(tl.sum(mask0.to(tl.float32), axis=1), axis=0), 1.0)
    acc1 = tl.zeros((BLOCK_C, BLOCK_HW), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_C, BLOCK_HW), dtype=tl.float32)
    for cb in range(0, n_cb):
        c = c_lo + cb * BLOCK_C + tl.arange(0, BLOCK_C)
        c_mask = c < Cg
        for hs in range(hw_lo, hw_hi, BLOCK_HW):
            h = hs + tl.arange(0, BLOCK_HW)
            mask = c_mask[:, None] & (h < hw_hi)[None, :]
            x = tl.load(X_g + c[:, None] * HW + h[None, :], mask=mask, other=0.0, eviction_policy=EVICT)
            d = tl.where(mask, x.to(tl.float32) - shift, 0.0)
            acc1 += d
            acc2 += d * d
    n_channels = tl.minimum(Cg, c_lo + n_cb * BLOCK_C) - c_lo
    n = (n_channels * (hw_hi - hw_lo)).to(tl.float32)
    s1 = tl.sum(tl.sum(acc1, axis=1), axis=0)
    s2 = tl.sum(tl.sum(acc2, axis=1), axis=0)
    mean_d = s1 / tl.maximum(n, 1.0)
    return n, shift + mean_d, tl.maximum(s2 - s1 * mean_d, 0.0)


@triton.jit
def _group_norm_chunk_apply(
    X_g, Y_g, W, B, g_c0, mean, rstd, c_lo, n_cb, hw_lo, hw_hi, Cg, HW,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
):  # fmt: skip
    for cb in range(0, n_cb):
        c = c_lo + cb * BLOCK_C + tl.arange(0, BLOCK_C)
        c_mask = c < Cg
        scale = tl.zeros((BLOCK_C,), dtype=tl.float32) + rstd
        shift = tl.zeros((BLOCK_C,), dtype=tl.float32)
        if HAS_WEIGHT:
            scale = scale * tl.load(W + g_c0 + c, mask=c_mask, other=0.0).to(tl.float32)
        if HAS_BIAS:
            shift = tl.load(B + g_c0 + c, mask=c_mask, other=0.0).to(tl.float32)
        # y = x * a + b' per channel, a = rstd * w, b' = bias - mean * a: one FMA per element.
        shift = shift - mean * scale
        for h0 in range(hw_lo, hw_hi, BLOCK_HW):
            h = h0 + tl.arange(0, BLOCK_HW)
            mask = c_mask[:, None] & (h < hw_hi)[None, :]
            offs = c[:, None] * HW + h[None, :]
            x = tl.load(X_g + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            y = x * scale[:, None] + shift[:, None]
            tl.store(Y_g + offs, y.to(Y_g.dtype.element_ty), mask=mask)


@triton.jit
def _group_norm_chunk_grad_sums(
    X_g, DY_g, W, PART_ROW, C, g_c0, mean, rstd, c_lo, n_cb, hw_lo, hw_hi, Cg, HW,
    HAS_WEIGHT: tl.constexpr, NEED_PARTIAL: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
    EVICT: tl.constexpr,
):  # fmt: skip
    # Returns (sum g * x_hat, sum g) over the chunk, g = dy * weight; stores the chunk's
    # per-channel sum(dy * x_hat) and sum(dy) into PART_ROW[c] and PART_ROW[C + c].
    s1 = tl.sum(tl.zeros((BLOCK_C,), dtype=tl.float32), axis=0)
    s2 = s1
    for cb in range(0, n_cb):
        c = c_lo + cb * BLOCK_C + tl.arange(0, BLOCK_C)
        c_mask = c < Cg
        if HAS_WEIGHT:
            w = tl.load(W + g_c0 + c, mask=c_mask, other=0.0).to(tl.float32)
        # Per-lane accumulators, reduced once per channel block (no block-wide sums in the loop).
        acc_dyx = tl.zeros((BLOCK_C, BLOCK_HW), dtype=tl.float32)
        acc_dy = tl.zeros((BLOCK_C, BLOCK_HW), dtype=tl.float32)
        for h0 in range(hw_lo, hw_hi, BLOCK_HW):
            h = h0 + tl.arange(0, BLOCK_HW)
            mask = c_mask[:, None] & (h < hw_hi)[None, :]
            offs = c[:, None] * HW + h[None, :]
            x = tl.load(X_g + offs, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
            dy = tl.load(DY_g + offs, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
            acc_dyx += dy * tl.where(mask, (x - mean) * rstd, 0.0)
            acc_dy += dy
        dw_c = tl.sum(acc_dyx, axis=1)
        db_c = tl.sum(acc_dy, axis=1)
        if HAS_WEIGHT:
            s1 += tl.sum(dw_c * w, axis=0)
            s2 += tl.sum(db_c * w, axis=0)
        else:
            s1 += tl.sum(dw_c, axis=0)
            s2 += tl.sum(db_c, axis=0)
        if NEED_PARTIAL:
            tl.store(PART_ROW + g_c0 + c, dw_c, mask=c_mask)
            tl.store(PART_ROW + C + g_c0 + c, db_c, mask=c_mask)
    return s1, s2


@triton.jit
def _group_norm_chunk_grad_apply(
    X_g, DY_g, DX_g, W, g_c0, mean, rstd, c1, c2, c_lo, n_cb, hw_lo, hw_hi, Cg, HW,
    HAS_WEIGHT: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
):  # fmt: skip
    # grad_x = rstd * (g - c2 - x_hat * c1), c1 = mean(g * x_hat), c2 = mean(g) over the group.
    for cb in range(0, n_cb):
        c = c_lo + cb * BLOCK_C + tl.arange(0, BLOCK_C)
        c_mask = c < Cg
        if HAS_WEIGHT:
            w = tl.load(W + g_c0 + c, mask=c_mask, other=0.0).to(tl.float32)
        for h0 in range(hw_lo, hw_hi, BLOCK_HW):
            h = h0 + tl.arange(0, BLOCK_HW)
            mask = c_mask[:, None] & (h < hw_hi)[None, :]
            offs = c[:, None] * HW + h[None, :]
            x = tl.load(X_g + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            dy = tl.load(DY_g + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            g = dy
            if HAS_WEIGHT:
                g = dy * w[:, None]
            dx = rstd * (g - c2 - (x - mean) * rstd * c1)
            tl.store(DX_g + offs, dx.to(DX_g.dtype.element_ty), mask=mask)


# -- fused plan: one program per (batch, group) ---------------------------------------------


@triton.jit
def _group_norm_fused_group(G, Cg, HW, BLOCK_C: tl.constexpr):
    """This program's (batch, group): ``(bg, base, g_c0, n_cb)``, the offset of its elements in
    the input (int64), its first channel and its number of channel blocks."""
    bg = tl.program_id(0)
    return bg, bg.to(tl.int64) * Cg * HW, (bg % G) * Cg, tl.cdiv(Cg, BLOCK_C)


@triton.jit
def _group_norm_fused_forward_kernel(
    X, W, B, Y, MEAN, RSTD, G, Cg, HW, eps,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
):  # fmt: skip
    bg, base, g_c0, n_cb = _group_norm_fused_group(G, Cg, HW, BLOCK_C)
    # The second pass re-reads the group: keep it in L2 (evict_last) on the way in.
    n, mean, m2 = _group_norm_chunk_stats(X + base, 0, n_cb, 0, HW, Cg, HW, BLOCK_C, BLOCK_HW, "evict_last")
    rstd = tl.math.rsqrt(m2 / n + eps)
    tl.store(MEAN + bg, mean)
    tl.store(RSTD + bg, rstd)
    _group_norm_chunk_apply(
        X + base, Y + base, W, B, g_c0, mean, rstd, 0, n_cb, 0, HW, Cg, HW, HAS_WEIGHT, HAS_BIAS, BLOCK_C, BLOCK_HW
    )


@triton.jit
def _group_norm_fused_backward_kernel(
    X, DY, W, MEAN, RSTD, DX, PARTIAL, G, C, Cg, HW,
    HAS_WEIGHT: tl.constexpr, NEED_PARTIAL: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
):  # fmt: skip
    bg, base, g_c0, n_cb = _group_norm_fused_group(G, Cg, HW, BLOCK_C)
    mean = tl.load(MEAN + bg)
    rstd = tl.load(RSTD + bg)
    part_row = PARTIAL + (bg // G).to(tl.int64) * (2 * C)
    s1, s2 = _group_norm_chunk_grad_sums(
        X + base, DY + base, W, part_row, C, g_c0, mean, rstd, 0, n_cb, 0, HW, Cg, HW,
        HAS_WEIGHT, NEED_PARTIAL, BLOCK_C, BLOCK_HW, "evict_last",
    )  # fmt: skip
    size = Cg * HW
    _group_norm_chunk_grad_apply(
        X + base, DY + base, DX + base, W, g_c0, mean, rstd, s1 / size, s2 / size, 0, n_cb, 0, HW, Cg, HW,
        HAS_WEIGHT, BLOCK_C, BLOCK_HW,
    )  # fmt: skip


# -- split plan: several programs per (batch, group) ----------------------------------------


@triton.jit
def _group_norm_split_chunk(chunk, n_spans, hw_span, HW):
    """A group's chunk ``chunk``: ``(cb, span, hw_lo, hw_hi)``, its channel block, its spatial span
    and that span's positions ``[hw_lo, hw_hi)``."""
    cb = chunk // n_spans
    span = chunk % n_spans
    hw_lo = span * hw_span
    return cb, span, hw_lo, tl.minimum(hw_lo + hw_span, HW)


@triton.jit
def _group_norm_split_stats_kernel(
    X, STATS, Cg, HW, n_spans, hw_span, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr, CHUNKS_P2: tl.constexpr
):
    bg = tl.program_id(0)
    chunk = tl.program_id(1)
    cb, _, hw_lo, hw_hi = _group_norm_split_chunk(chunk, n_spans, hw_span, HW)
    n, mean, m2 = _group_norm_chunk_stats(
        X + bg.to(tl.int64) * Cg * HW, cb * BLOCK_C, 1, hw_lo, hw_hi, Cg, HW, BLOCK_C, BLOCK_HW, "evict_last"
    )
    out = STATS + (bg.to(tl.int64) * CHUNKS_P2 + chunk) * 3
    tl.store(out, n)
    tl.store(out + 1, mean)
    tl.store(out + 2, m2)


@triton.jit
def _group_norm_group_stats(STATS, bg, n_chunks, eps, CHUNKS_P2: tl.constexpr):
    # Combine a group's chunk statistics: mean = sum(n_i mean_i) / n,
    # M2 = sum(M2_i + n_i (mean_i - mean)^2).
    k = tl.arange(0, CHUNKS_P2)
    km = k < n_chunks
    base = STATS + (bg.to(tl.int64) * CHUNKS_P2 + k) * 3
    n_i = tl.load(base, mask=km, other=0.0)
    mean_i = tl.load(base + 1, mask=km, other=0.0)
    m2_i = tl.load(base + 2, mask=km, other=0.0)
    n = tl.sum(n_i, axis=0)
    mean = tl.sum(n_i * mean_i, axis=0) / n
    d = mean_i - mean
    m2 = tl.sum(m2_i + n_i * d * d, axis=0)
    return mean, tl.math.rsqrt(m2 / n + eps)


@triton.jit
def _group_norm_split_apply_kernel(
    X, W, B, Y, STATS, MEAN, RSTD, n_groups, G, Cg, HW, n_spans, hw_span, n_chunks, eps,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
    CHUNKS_P2: tl.constexpr,
):  # fmt: skip
    # Reverse order: the chunks phase 1 read last are the first read here (still in L2).
    bg = n_groups - 1 - tl.program_id(0)
    chunk = n_chunks - 1 - tl.program_id(1)
    mean, rstd = _group_norm_group_stats(STATS, bg, n_chunks, eps, CHUNKS_P2)
    if chunk == 0:
        tl.store(MEAN + bg, mean)
        tl.store(RSTD + bg, rstd)
    cb, _, hw_lo, hw_hi = _group_norm_split_chunk(chunk, n_spans, hw_span, HW)
    base = bg.to(tl.int64) * Cg * HW
    _group_norm_chunk_apply(
        X + base, Y + base, W, B, (bg % G) * Cg, mean, rstd, cb * BLOCK_C, 1, hw_lo, hw_hi, Cg, HW,
        HAS_WEIGHT, HAS_BIAS, BLOCK_C, BLOCK_HW,
    )  # fmt: skip


@triton.jit
def _group_norm_split_grad_sums_kernel(
    X, DY, W, MEAN, RSTD, GSUMS, PARTIAL, G, C, Cg, HW, n_spans, hw_span,
    HAS_WEIGHT: tl.constexpr, NEED_PARTIAL: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
    CHUNKS_P2: tl.constexpr,
):  # fmt: skip
    bg = tl.program_id(0)
    chunk = tl.program_id(1)
    cb, span, hw_lo, hw_hi = _group_norm_split_chunk(chunk, n_spans, hw_span, HW)
    base = bg.to(tl.int64) * Cg * HW
    mean = tl.load(MEAN + bg)
    rstd = tl.load(RSTD + bg)
    # Partial row per (batch, spatial span): its channels are written by exactly one program.
    part_row = PARTIAL + ((bg // G) * n_spans + span).to(tl.int64) * (2 * C)
    s1, s2 = _group_norm_chunk_grad_sums(
        X + base, DY + base, W, part_row, C, (bg % G) * Cg, mean, rstd, cb * BLOCK_C, 1, hw_lo, hw_hi, Cg, HW,
        HAS_WEIGHT, NEED_PARTIAL, BLOCK_C, BLOCK_HW, "evict_last",
    )  # fmt: skip
    out = GSUMS + (bg.to(tl.int64) * CHUNKS_P2 + chunk) * 2
    tl.store(out, s1)
    tl.store(out + 1, s2)


@triton.jit
def _group_norm_split_grad_apply_kernel(
    X, DY, W, MEAN, RSTD, GSUMS, DX, n_groups, G, Cg, HW, n_spans, hw_span, n_chunks,
    HAS_WEIGHT: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr, CHUNKS_P2: tl.constexpr,
):  # fmt: skip
    bg = n_groups - 1 - tl.program_id(0)
    chunk = n_chunks - 1 - tl.program_id(1)
    k = tl.arange(0, CHUNKS_P2)
    km = k < n_chunks
    sums = GSUMS + (bg.to(tl.int64) * CHUNKS_P2 + k) * 2
    size = Cg * HW
    c1 = tl.sum(tl.load(sums, mask=km, other=0.0), axis=0) / size
    c2 = tl.sum(tl.load(sums + 1, mask=km, other=0.0), axis=0) / size
    cb, _, hw_lo, hw_hi = _group_norm_split_chunk(chunk, n_spans, hw_span, HW)
    base = bg.to(tl.int64) * Cg * HW
    _group_norm_chunk_grad_apply(
        X + base, DY + base, DX + base, W, (bg % G) * Cg, tl.load(MEAN + bg), tl.load(RSTD + bg), c1, c2,
        cb * BLOCK_C, 1, hw_lo, hw_hi, Cg, HW, HAS_WEIGHT, BLOCK_C, BLOCK_HW,
    )  # fmt: skip


# -- plan and launch ----------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupPlan:
    block_c: int
    block_hw: int
    num_warps: int
    split: bool
    # Split plan: a chunk is one channel block x hw_span spatial positions.
    hw_span: int
    n_spans: int
    n_chunks: int


def plan_groups(
    n_groups: int, channels_per_group: int, hw: int, device: torch.device, split: bool | None = None
) -> GroupPlan:
    """Tile and work split for ``n_groups`` groups of ``channels_per_group x hw`` elements.

    ``split`` forces the plan (tests, tuning); by default a group is split when there are
    too few groups to give every SM several programs and the group is larger than a chunk.
    """
    tile = hardware.GROUP_NORM_TILE_ELEMENTS
    block_hw = min(triton.next_power_of_2(max(hw, 1)), tile)
    block_c = max(1, min(triton.next_power_of_2(channels_per_group), tile // block_hw))
    warps = hardware.num_warps_for(block_c * block_hw, hardware.GROUP_NORM_ELEMENTS_PER_WARP)
    n_cb = triton.cdiv(channels_per_group, block_c)
    group_size = channels_per_group * hw
    if split is None:
        target = hardware.sm_count(device.index) * hardware.GROUP_NORM_SPLIT_PROGRAMS_PER_SM
        split = n_groups < target and group_size > hardware.GROUP_NORM_CHUNK_ELEMENTS
    if not split:
        return GroupPlan(block_c, block_hw, warps, False, hw, 1, 1)
    # Spatial span of a chunk: whole tiles, about GROUP_NORM_CHUNK_ELEMENTS per chunk.
    tiles_per_span = max(1, hardware.GROUP_NORM_CHUNK_ELEMENTS // (block_c * block_hw))
    hw_span = min(tiles_per_span * block_hw, triton.cdiv(max(hw, 1), block_hw) * block_hw)
    n_spans = triton.cdiv(max(hw, 1), hw_span)
    return GroupPlan(block_c, block_hw, warps, True, hw_span, n_spans, n_cb * n_spans)


def group_norm_forward(
    x3: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, num_groups: int, eps: float,
    plan: GroupPlan,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    batch, channels, hw = x3.shape
    cg = channels // num_groups
    n_groups = batch * num_groups
    y = torch.empty_like(x3)
    mean = torch.empty(n_groups, dtype=torch.float32, device=x3.device)
    rstd = torch.empty(n_groups, dtype=torch.float32, device=x3.device)
    if x3.numel() == 0:
        return y, mean, rstd
    w = weight if weight is not None else x3
    b = bias if bias is not None else x3
    flags = dict(HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None, BLOCK_C=plan.block_c, BLOCK_HW=plan.block_hw)
    if not plan.split:
        _group_norm_fused_forward_kernel[(n_groups,)](
            x3, w, b, y, mean, rstd, num_groups, cg, hw, eps, **flags, num_warps=plan.num_warps
        )
        return y, mean, rstd
    chunks_p2 = triton.next_power_of_2(plan.n_chunks)
    stats = torch.empty((n_groups, chunks_p2, 3), dtype=torch.float32, device=x3.device)
    grid = (n_groups, plan.n_chunks)
    _group_norm_split_stats_kernel[grid](
        x3, stats, cg, hw, plan.n_spans, plan.hw_span,
        BLOCK_C=plan.block_c, BLOCK_HW=plan.block_hw, CHUNKS_P2=chunks_p2, num_warps=plan.num_warps,
    )  # fmt: skip
    _group_norm_split_apply_kernel[grid](
        x3, w, b, y, stats, mean, rstd, n_groups, num_groups, cg, hw, plan.n_spans, plan.hw_span, plan.n_chunks, eps,
        **flags, CHUNKS_P2=chunks_p2, num_warps=plan.num_warps,
    )  # fmt: skip
    return y, mean, rstd


def group_norm_backward(
    dy3: torch.Tensor,
    x3: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    num_groups: int,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    plan: GroupPlan,
    dx: torch.Tensor,
    need_dw: bool = True,
    need_db: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Launch the backward: grad_x into ``dx``; returns ``(grad_weight, grad_bias)``."""
    batch, channels, hw = x3.shape
    cg = channels // num_groups
    n_groups = batch * num_groups
    need_dw = need_dw and weight is not None
    need_db = need_db and bias is not None
    need_partial = need_dw or need_db
    rows = batch * plan.n_spans
    partial = torch.empty((rows, 2 * channels), dtype=torch.float32, device=x3.device) if need_partial else None
    w = weight if weight is not None else x3
    if x3.numel() > 0:
        flags = dict(HAS_WEIGHT=weight is not None, BLOCK_C=plan.block_c, BLOCK_HW=plan.block_hw)
        part = partial if need_partial else mean
        if not plan.split:
            _group_norm_fused_backward_kernel[(n_groups,)](
                x3, dy3, w, mean, rstd, dx, part, num_groups, channels, cg, hw,
                NEED_PARTIAL=need_partial, **flags, num_warps=plan.num_warps,
            )  # fmt: skip
        else:
            chunks_p2 = triton.next_power_of_2(plan.n_chunks)
            gsums = torch.empty((n_groups, chunks_p2, 2), dtype=torch.float32, device=x3.device)
            grid = (n_groups, plan.n_chunks)
            _group_norm_split_grad_sums_kernel[grid](
                x3, dy3, w, mean, rstd, gsums, part, num_groups, channels, cg, hw, plan.n_spans, plan.hw_span,
                NEED_PARTIAL=need_partial, **flags, CHUNKS_P2=chunks_p2, num_warps=plan.num_warps,
            )  # fmt: skip
            _group_norm_split_grad_apply_kernel[grid](
                x3, dy3, w, mean, rstd, gsums, dx, n_groups, num_groups, cg, hw, plan.n_spans, plan.hw_span,
                plan.n_chunks, **flags, CHUNKS_P2=chunks_p2, num_warps=plan.num_warps,
            )  # fmt: skip
    elif need_partial:
        partial.zero_()
    dw = torch.empty_like(weight) if need_dw else None
    db = torch.empty_like(bias) if need_db else None
    if need_partial:
        sum_partials(partial, rows, dw, db, channels)
    return dw, db


class GroupNormKernels:
    """`liger_core.drivers.group_norm.GroupNormKernels` on this module's kernels; the forward's
    group plan is the backward's ``state``."""

    protocol = group_norm_driver.PROTOCOL

    @staticmethod
    def forward(x3, weight, bias, num_groups, eps):
        batch, channels, spatial = x3.shape
        plan = plan_groups(batch * num_groups, channels // num_groups, spatial, x3.device)
        y, mean, rstd = group_norm_forward(x3, weight, bias, num_groups, eps, plan)
        return y, mean, rstd, plan

    @staticmethod
    def backward(dy3, x3, weight, bias, num_groups, mean, rstd, dx, need_dw, need_db, state):
        return group_norm_backward(dy3, x3, weight, bias, num_groups, mean, rstd, state, dx, need_dw, need_db)


LigerGroupNormFunction = implements("group_norm")(group_norm_driver.autograd_function(GroupNormKernels(), __name__))
