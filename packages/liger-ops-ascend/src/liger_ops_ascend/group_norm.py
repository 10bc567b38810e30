"""GroupNorm for Ascend NPUs: triton-ascend kernels, UB-aware tile plans and autograd Function.

``x`` (batch, channels, *spatial) is read as ``batch * groups`` groups, each a contiguous
``(channels_per_group, spatial)`` block. The classic trap on Ascend is a grid of one
program per (batch, group): 65536 of them fail to launch. Here the grid is one program per
vector core and each program walks the groups ``pid, pid + programs, ...``.

A tile is ``BLOCK_C`` channels x ``BLOCK_S`` spatial positions sized to the UB budget.
When a whole group fits one tile the forward keeps it in the UB (mean, then the variance of
the centred group); otherwise it loops over channel and spatial chunks with sums shifted by
the group's first element, then normalises chunk by chunk.

Backward: per group, the coefficients ``sum(g)`` and ``sum(g * x_hat)`` (``g = dy * weight``),
then grad_x (one load of the group when it fits a tile, else two passes over its chunks); grad_weight and grad_bias are summed over each group's spatial positions into
``(batch, channels)`` fp32 partials (every element written by one program, once) and
reduced over the batch afterwards: no atomics across cores.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.ops.group_norm import check_args

from liger_ops_ascend import hardware
from liger_ops_ascend._tiling import FP32, dtype_of, elem_bytes, loaded, sum_partials
from liger_ops_ascend.launch import AscendLaunchError, KernelPlan, Tile, launch


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
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    c_idx = tl.arange(0, BLOCK_C)
    s_idx = tl.arange(0, BLOCK_S)
    group_size = cpg * spatial
    for row_i in range(pid, n_rows, num_programs):
        row = pid * 0 + row_i  # a tensor: the interpreter's loop variable is a Python int
        g = row % n_groups
        base = row.to(tl.int64) * group_size
        if SINGLE_TILE:
            mask = (c_idx < cpg)[:, None] & (s_idx < spatial)[None, :]
            offs = c_idx[:, None] * spatial + s_idx[None, :]
            xf = tl.load(X + base + offs, mask=mask, other=0.0).to(tl.float32)
            mean = tl.sum(tl.sum(xf, axis=1), axis=0) / group_size
            xc = tl.where(mask, xf - mean, 0.0)
            rstd = tl.math.rsqrt(tl.sum(tl.sum(xc * xc, axis=1), axis=0) / group_size + eps)
            y = xc * rstd
            ch_mask = c_idx < cpg
            if HAS_WEIGHT:
                y = y * tl.load(W + g * cpg + c_idx, mask=ch_mask, other=0.0).to(tl.float32)[:, None]
            if HAS_BIAS:
                y = y + tl.load(B + g * cpg + c_idx, mask=ch_mask, other=0.0).to(tl.float32)[:, None]
            tl.store(Y + base + offs, y.to(Y.dtype.element_ty), mask=mask)
        else:
            shift = tl.load(X + base).to(tl.float32)
            # fp32 scalar accumulators (a literal 0.0 would change type inside the loop).
            s1 = shift * 0.0
            s2 = shift * 0.0
            for cc in range(n_c_chunks):
                chans = cc * BLOCK_C + c_idx
                for sc in range(n_s_chunks):
                    sp = sc * BLOCK_S + s_idx
                    mask = (chans < cpg)[:, None] & (sp < spatial)[None, :]
                    xf = tl.load(X + base + chans[:, None] * spatial + sp[None, :], mask=mask, other=0.0).to(tl.float32)
                    d = tl.where(mask, xf - shift, 0.0)
                    s1 += tl.sum(tl.sum(d, axis=1), axis=0)
                    s2 += tl.sum(tl.sum(d * d, axis=1), axis=0)
            m1 = s1 / group_size
            mean = shift + m1
            rstd = tl.math.rsqrt(tl.maximum(s2 / group_size - m1 * m1, 0.0) + eps)
            for cc in range(n_c_chunks):
                chans = cc * BLOCK_C + c_idx
                ch_mask = chans < cpg
                if HAS_WEIGHT:
                    w = tl.load(W + g * cpg + chans, mask=ch_mask, other=0.0).to(tl.float32)
                if HAS_BIAS:
                    b = tl.load(B + g * cpg + chans, mask=ch_mask, other=0.0).to(tl.float32)
                for sc in range(n_s_chunks):
                    sp = sc * BLOCK_S + s_idx
                    mask = ch_mask[:, None] & (sp < spatial)[None, :]
                    offs = chans[:, None] * spatial + sp[None, :]
                    xf = tl.load(X + base + offs, mask=mask, other=0.0).to(tl.float32)
                    y = (xf - mean) * rstd
                    if HAS_WEIGHT:
                        y = y * w[:, None]
                    if HAS_BIAS:
                        y = y + b[:, None]
                    tl.store(Y + base + offs, y.to(Y.dtype.element_ty), mask=mask)
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
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    c_idx = tl.arange(0, BLOCK_C)
    s_idx = tl.arange(0, BLOCK_S)
    group_size = cpg * spatial
    for row_i in range(pid, n_rows, num_programs):
        row = pid * 0 + row_i  # a tensor: the interpreter's loop variable is a Python int
        g = row % n_groups
        base = row.to(tl.int64) * group_size
        mean = tl.load(MEAN + row)
        rstd = tl.load(RSTD + row)
        if SINGLE_TILE:
            # The whole group is one tile: one load of x and dy, kept in the UB.
            ch_mask = c_idx < cpg
            mask = ch_mask[:, None] & (s_idx < spatial)[None, :]
            offs = c_idx[:, None] * spatial + s_idx[None, :]
            xf = tl.load(X + base + offs, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(DY + base + offs, mask=mask, other=0.0).to(tl.float32)
            x_hat = tl.where(mask, (xf - mean) * rstd, 0.0)
            gr = dy
            if HAS_WEIGHT:
                gr = dy * tl.load(W + g * cpg + c_idx, mask=ch_mask, other=0.0).to(tl.float32)[:, None]
            c1 = tl.sum(tl.sum(gr, axis=1), axis=0) / group_size
            c2 = tl.sum(tl.sum(gr * x_hat, axis=1), axis=0) / group_size
            dx = (gr - c1 - x_hat * c2) * rstd
            tl.store(DX + base + offs, dx.to(DX.dtype.element_ty), mask=mask)
            part = row.to(tl.int64) * cpg  # int64 scalar offset; the channel index stays int32
            if HAS_WEIGHT:
                tl.store(DW_PARTIAL + part + c_idx, tl.sum(dy * x_hat, axis=1), mask=ch_mask)
            if HAS_BIAS:
                tl.store(DB_PARTIAL + part + c_idx, tl.sum(dy, axis=1), mask=ch_mask)
        else:
            sum_g = mean * 0.0
            sum_gx = mean * 0.0
            for cc in range(n_c_chunks):
                chans = cc * BLOCK_C + c_idx
                ch_mask = chans < cpg
                for sc in range(n_s_chunks):
                    sp = sc * BLOCK_S + s_idx
                    mask = ch_mask[:, None] & (sp < spatial)[None, :]
                    offs = chans[:, None] * spatial + sp[None, :]
                    xf = tl.load(X + base + offs, mask=mask, other=0.0).to(tl.float32)
                    gr = tl.load(DY + base + offs, mask=mask, other=0.0).to(tl.float32)
                    if HAS_WEIGHT:
                        gr = gr * tl.load(W + g * cpg + chans, mask=ch_mask, other=0.0).to(tl.float32)[:, None]
                    sum_g += tl.sum(tl.sum(gr, axis=1), axis=0)
                    sum_gx += tl.sum(tl.sum(gr * (xf - mean), axis=1), axis=0)
            c1 = sum_g / group_size
            c2 = sum_gx * rstd / group_size
            for cc in range(n_c_chunks):
                chans = cc * BLOCK_C + c_idx
                ch_mask = chans < cpg
                if HAS_WEIGHT:
                    w = tl.load(W + g * cpg + chans, mask=ch_mask, other=0.0).to(tl.float32)
                dw_acc = tl.zeros((BLOCK_C,), dtype=tl.float32)
                db_acc = tl.zeros((BLOCK_C,), dtype=tl.float32)
                for sc in range(n_s_chunks):
                    sp = sc * BLOCK_S + s_idx
                    mask = ch_mask[:, None] & (sp < spatial)[None, :]
                    offs = chans[:, None] * spatial + sp[None, :]
                    xf = tl.load(X + base + offs, mask=mask, other=0.0).to(tl.float32)
                    dy = tl.load(DY + base + offs, mask=mask, other=0.0).to(tl.float32)
                    x_hat = tl.where(mask, (xf - mean) * rstd, 0.0)
                    gr = dy
                    if HAS_WEIGHT:
                        gr = dy * w[:, None]
                    dx = (gr - c1 - x_hat * c2) * rstd
                    tl.store(DX + base + offs, dx.to(DX.dtype.element_ty), mask=mask)
                    dw_acc += tl.sum(dy * x_hat, axis=1)
                    db_acc += tl.sum(dy, axis=1)
                part = row.to(tl.int64) * cpg
                if HAS_WEIGHT:
                    tl.store(DW_PARTIAL + part + chans, dw_acc, mask=ch_mask)
                if HAS_BIAS:
                    tl.store(DB_PARTIAL + part + chans, db_acc, mask=ch_mask)


# -- tile plans ------------------------------------------------------------------------------


def forward_tiles(m: int, n: int, xb: int, wb: int, bb: int) -> tuple[Tile, ...]:
    tiles = loaded("x", m, n, xb) + [Tile(t, m, n, FP32) for t in ("x_centred", "sq", "y_f32")]
    tiles += [Tile("y", m, n, xb), Tile("row_sums_f32", 1, m, FP32)]
    tiles += loaded("weight", 1, m, wb) + loaded("bias", 1, m, bb)
    return tuple(tiles)


def backward_tiles(m: int, n: int, xb: int, wb: int, bb: int) -> tuple[Tile, ...]:
    tiles = loaded("x", m, n, xb) + loaded("dy", m, n, xb)
    tiles += [Tile(t, m, n, FP32) for t in ("x_hat", "g", "g_x_hat", "dx_f32", "dy_x_hat")] + [Tile("dx", m, n, xb)]
    tiles += loaded("weight", 1, m, wb)
    tiles += [Tile(t, 1, m, FP32) for t in ("dw_acc", "db_acc", "dw_rowsum", "db_rowsum", "row_sums")]
    return tuple(tiles)


@dataclass(frozen=True)
class GroupNormPlan:
    block_c: int
    block_s: int
    n_c_chunks: int
    n_s_chunks: int
    programs: int
    n_iters: int
    kernels: tuple[KernelPlan, ...]

    @property
    def single_tile(self) -> bool:
        return self.n_c_chunks == 1 and self.n_s_chunks == 1


@functools.lru_cache(maxsize=1024)
def _plan_groups(
    n_rows: int,
    cpg: int,
    spatial: int,
    xb: int,
    wb: int,
    bb: int,
    hw: hardware.Hardware,
    max_block_c: int,
    max_block_s: int,
) -> GroupNormPlan:
    fwd = functools.partial(forward_tiles, xb=xb, wb=wb, bb=bb)
    bwd = functools.partial(backward_tiles, xb=xb, wb=wb, bb=bb)

    def need(m: int, n: int) -> int:
        return max(sum(t.nbytes for t in tiles(m, n)) for tiles in (fwd, bwd))

    min_n = max(hardware.min_block(b) for b in (xb, wb, bb) if b)
    block_s = max(min_n, min(triton.next_power_of_2(spatial), max_block_s))
    while block_s > min_n and need(1, block_s) > hw.ub_budget:
        block_s //= 2
    if need(1, block_s) > hw.ub_budget:
        raise AscendLaunchError(
            f"liger-ops-ascend group_norm: even a 1x{block_s} tile overflows; {hw.describe_budget()}"
        )
    block_c = 1
    c_cap = min(max_block_c, triton.next_power_of_2(cpg))
    while block_c * 2 <= c_cap and need(block_c * 2, block_s) <= hw.ub_budget:
        block_c *= 2
    programs = min(hw.vector_cores, max(n_rows, 1))
    grid = (programs,)
    return GroupNormPlan(
        block_c=block_c,
        block_s=block_s,
        n_c_chunks=triton.cdiv(cpg, block_c),
        n_s_chunks=triton.cdiv(spatial, block_s),
        programs=programs,
        n_iters=triton.cdiv(max(n_rows, 1), programs),
        kernels=(
            KernelPlan("group_norm_forward", grid, fwd(block_c, block_s)),
            KernelPlan("group_norm_backward", grid, bwd(block_c, block_s)),
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
        batch * groups,
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
    y = torch.empty_like(xc)
    mean = torch.empty(n_rows, dtype=torch.float32, device=xc.device)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=xc.device)
    if xc.numel():
        launch(
            _group_norm_forward_kernel,
            p.kernels[0],
            hw,
            xc,
            xc if weight is None else weight,
            xc if bias is None else bias,
            y,
            mean,
            rstd,
            n_rows,
            num_groups,
            num_channels // num_groups,
            xc[0, 0].numel(),
            p.n_c_chunks,
            p.n_s_chunks,
            eps,
            HAS_WEIGHT=weight is not None,
            HAS_BIAS=bias is not None,
            BLOCK_C=p.block_c,
            BLOCK_S=p.block_s,
            SINGLE_TILE=p.single_tile,
        )
    return y, mean, rstd


def group_norm_backward(
    dyc: torch.Tensor,
    xc: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    num_groups: int,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    p: GroupNormPlan,
    hw: hardware.Hardware,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """``(grad_x, grad_weight, grad_bias)``; ``dyc`` contiguous like ``xc``."""
    batch, num_channels = xc.shape[:2]
    dx = torch.empty_like(xc)
    has_w, has_b = weight is not None, bias is not None
    part = (batch, num_channels)
    dw_part = torch.zeros(part, dtype=torch.float32, device=xc.device) if has_w else rstd
    db_part = torch.zeros(part, dtype=torch.float32, device=xc.device) if has_b else rstd
    if xc.numel():
        launch(
            _group_norm_backward_kernel,
            p.kernels[1],
            hw,
            dyc,
            xc,
            xc if weight is None else weight,
            mean,
            rstd,
            dx,
            dw_part,
            db_part,
            batch * num_groups,
            num_groups,
            num_channels // num_groups,
            xc[0, 0].numel(),
            p.n_c_chunks,
            p.n_s_chunks,
            HAS_WEIGHT=has_w,
            HAS_BIAS=has_b,
            BLOCK_C=p.block_c,
            BLOCK_S=p.block_s,
            SINGLE_TILE=p.single_tile,
        )
    # Second stage: the per-sample partials summed over the batch.
    dw = sum_partials(dw_part, weight.dtype) if has_w else None
    db = sum_partials(db_part, bias.dtype) if has_b else None
    return dx, dw, db


@implements("group_norm")
class LigerGroupNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, num_channels, num_groups, eps):
        check_args(x, weight, bias, num_channels, num_groups, eps)
        hw = hardware.current(x.device)
        xc = x.contiguous()
        batch = x.shape[0]
        spatial = x[0, 0].numel() if batch and num_channels else 1
        p = plan_groups(batch, num_channels, num_groups, spatial, x.dtype, dtype_of(weight), dtype_of(bias), hw)
        y, mean, rstd = group_norm_forward(xc, weight, bias, num_groups, float(eps), p, hw)
        ctx.save_for_backward(xc, weight, bias, mean, rstd)
        ctx.num_groups, ctx.plan, ctx.hw = num_groups, p, hw
        return y

    @staticmethod
    def backward(ctx, dy):
        xc, weight, bias, mean, rstd = ctx.saved_tensors
        dx, dw, db = group_norm_backward(
            dy.contiguous(), xc, weight, bias, ctx.num_groups, mean, rstd, ctx.plan, ctx.hw
        )
        return dx, dw, db, None, None, None
