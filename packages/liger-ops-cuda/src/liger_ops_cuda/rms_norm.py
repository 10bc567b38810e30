"""RMSNorm and residual add + RMSNorm for NVIDIA GPUs: Triton kernels, launch plans and the kernel
adapter of `liger_core.drivers.rms_norm`.

Forward: each program normalises BLOCK_M rows (several short rows per tile, one wide row per
tile, or a wide row in CHUNK-wide pieces) and stores the fp32 reciprocal RMS for backward.
With HAS_RESIDUAL (fused_add_rms_norm) the row is ``s = x + residual``, summed in fp32 and
rounded once to x's dtype, stored as the new residual and normalised from registers.

Backward: a grid of one program per SM walks its share of rows, writes grad_x and
accumulates grad_weight in fp32 registers; the per-SM partial rows are summed once at the end
(no atomics, deterministic). With HAS_DRES the incoming gradient of the new residual is added
to grad_x, which is also the residual's gradient (one buffer when the dtypes agree, as autograd
does for ``x + residual``; WRITE_DR stores it again in the residual's dtype otherwise).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.drivers import rms_norm as rms_norm_driver
from liger_ops_cuda import hardware
from liger_ops_cuda._jit import row_group, row_tile
from liger_ops_cuda._tiling import (
    TilePlan,
    backward_programs,
    plan_backward_tiles,
    plan_tiles,
    sum_partials,
)

# casting_mode -> whether x_hat is rounded to x.dtype before the weight multiply
# ("llama" and "none" round; "gemma" stays in fp32 throughout).
_ROUND_X_HAT = {"llama": True, "none": True, "gemma": False}


@triton.jit
def _normalise_rows(x, n_cols, eps, ROUND_X_HAT: tl.constexpr):
    """``(x_hat, rstd)`` of a tile of whole rows ``x``: x * rstd in fp32, rounded to x's dtype where
    the casting mode rounds (the weight multiply is the caller's: its load is masked or not)."""
    xf = x.to(tl.float32)
    rstd = tl.math.rsqrt(tl.sum(xf * xf, axis=1) / n_cols + eps)
    x_hat = xf * rstd[:, None]
    if ROUND_X_HAT:
        x_hat = x_hat.to(x.dtype).to(tl.float32)
    return x_hat, rstd


@triton.jit
def _rms_norm_forward_kernel(
    X,
    R,
    W,
    Y,
    S,
    RSTD,
    x_row_stride,
    r_row_stride,
    y_row_stride,
    s_row_stride,
    n_rows,
    n_cols,
    eps,
    offset,
    HAS_WEIGHT: tl.constexpr,
    ROUND_X_HAT: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CHUNKED: tl.constexpr,
    UNMASKED: tl.constexpr,
):
    # HAS_RESIDUAL: the normalised row is x + R, stored to S (the new residual).
    rows, row_mask, rows64 = row_tile(tl.program_id(0) * BLOCK_M, n_rows, BLOCK_M)
    # Where a row pointer is formed is part of the compiled code each variant was tuned with:
    # without a residual, before the column offsets; with one, at each access.
    if not HAS_RESIDUAL:
        x_rows = X + rows64 * x_row_stride
        y_rows = Y + rows64 * y_row_stride
    cols = tl.arange(0, BLOCK_N)

    if CHUNKED:
        # Pass 1: the mean square (with a residual: forms and stores the new residual);
        # pass 2 re-reads the row (the new residual from S) and writes y.
        sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_mask[:, None] & (c < n_cols)[None, :]
            x = tl.load(X + rows64 * x_row_stride + c[None, :], mask=mask, other=0.0)
            if HAS_RESIDUAL:
                r = tl.load(R + rows64 * r_row_stride + c[None, :], mask=mask, other=0.0)
                x = (x.to(tl.float32) + r.to(tl.float32)).to(S.dtype.element_ty)
                tl.store(S + rows64 * s_row_stride + c[None, :], x, mask=mask)
            xf = x.to(tl.float32)
            sum_sq += tl.sum(xf * xf, axis=1)
        rstd = tl.math.rsqrt(sum_sq / n_cols + eps)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            col_mask = c < n_cols
            mask = row_mask[:, None] & col_mask[None, :]
            if HAS_RESIDUAL:
                x = tl.load(S + rows64 * s_row_stride + c[None, :], mask=mask, other=0.0)
            else:
                x = tl.load(X + rows64 * x_row_stride + c[None, :], mask=mask, other=0.0)
            x_hat = x.to(tl.float32) * rstd[:, None]
            if ROUND_X_HAT:
                x_hat = x_hat.to(x.dtype).to(tl.float32)
            if HAS_WEIGHT:
                w = tl.load(W + c, mask=col_mask, other=0.0).to(tl.float32)
                x_hat = x_hat * (w + offset)[None, :]
            tl.store(Y + rows64 * y_row_stride + c[None, :], x_hat.to(Y.dtype.element_ty), mask=mask)
    elif UNMASKED:
        # Tiles exactly cover the rows (hidden a power of two, rows a multiple of BLOCK_M):
        # no predicates, and x is streamed (evict_first) so it does not push y out of L2.
        tl.static_assert(not HAS_RESIDUAL, "the unmasked tiles take no residual")
        x = tl.load(x_rows + cols[None, :], eviction_policy="evict_first")
        x_hat, rstd = _normalise_rows(x, n_cols, eps, ROUND_X_HAT)
        if HAS_WEIGHT:
            w = tl.load(W + cols).to(tl.float32)
            x_hat = x_hat * (w + offset)[None, :]
        tl.store(y_rows + cols[None, :], x_hat.to(Y.dtype.element_ty))
    else:
        col_mask = cols < n_cols
        mask = row_mask[:, None] & col_mask[None, :]
        if HAS_RESIDUAL:
            x_rows = X + rows64 * x_row_stride
        x = tl.load(x_rows + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
        if HAS_RESIDUAL:
            r = tl.load(R + rows64 * r_row_stride + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
            x = (x.to(tl.float32) + r.to(tl.float32)).to(S.dtype.element_ty)
            tl.store(S + rows64 * s_row_stride + cols[None, :], x, mask=mask)
        x_hat, rstd = _normalise_rows(x, n_cols, eps, ROUND_X_HAT)
        if HAS_WEIGHT:
            w = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)
            x_hat = x_hat * (w + offset)[None, :]
        if HAS_RESIDUAL:
            y_rows = Y + rows64 * y_row_stride
        tl.store(y_rows + cols[None, :], x_hat.to(Y.dtype.element_ty), mask=mask)
    tl.store(RSTD + rows, rstd, mask=row_mask)


@triton.jit
def _rms_norm_backward_kernel(
    DY,
    X,
    W,
    RSTD,
    DX,
    DW_PARTIAL,
    DRES,
    DR_OUT,
    dy_row_stride,
    x_row_stride,
    dx_row_stride,
    dres_row_stride,
    dr_out_row_stride,
    n_rows,
    n_cols,
    offset,
    rows_per_program,
    HAS_WEIGHT: tl.constexpr,
    NEED_DW: tl.constexpr,
    ROUND_X_HAT: tl.constexpr,
    HAS_DRES: tl.constexpr,
    WRITE_DR: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CHUNKED: tl.constexpr,
):
    # grad_x = rstd * (g - x_hat * mean(g * x_hat)) (+ DRES), g = dy * (w + offset);
    # grad_w = sum over rows of dy * x_hat (x_hat rounded to x.dtype where the forward rounded it).
    # X is the normalised input (fused_add_rms_norm: the new residual). WRITE_DR: grad_x is also
    # stored to DR_OUT, the residual's gradient in its own dtype.
    pid, row_start, row_end = row_group(rows_per_program, n_rows)
    cols = tl.arange(0, BLOCK_N)
    dw_row = DW_PARTIAL + pid.to(tl.int64) * n_cols

    if CHUNKED:
        # Wide rows, one row at a time (BLOCK_M == 1): a pass for the row's dot product
        # sum(g * x_hat), a pass that writes grad_x and accumulates grad_weight in DW_PARTIAL.
        for i in range(0, row_end - row_start):
            row = row_start + i
            row64 = row.to(tl.int64)
            rstd = tl.load(RSTD + row)
            dot = tl.zeros((BLOCK_N,), dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                col_mask = c < n_cols
                x = tl.load(X + row64 * x_row_stride + c, mask=col_mask, other=0.0).to(tl.float32)
                g = tl.load(DY + row64 * dy_row_stride + c, mask=col_mask, other=0.0).to(tl.float32)
                if HAS_WEIGHT:
                    g = g * (tl.load(W + c, mask=col_mask, other=0.0).to(tl.float32) + offset)
                dot += g * x
            mean_gx = tl.sum(dot, axis=0) * rstd / n_cols
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                col_mask = c < n_cols
                x = tl.load(X + row64 * x_row_stride + c, mask=col_mask, other=0.0)
                dy = tl.load(DY + row64 * dy_row_stride + c, mask=col_mask, other=0.0).to(tl.float32)
                x_hat = x.to(tl.float32) * rstd
                g = dy
                if HAS_WEIGHT:
                    g = dy * (tl.load(W + c, mask=col_mask, other=0.0).to(tl.float32) + offset)
                dx = rstd * (g - x_hat * mean_gx)
                if HAS_DRES:
                    dx += tl.load(DRES + row64 * dres_row_stride + c, mask=col_mask, other=0.0).to(tl.float32)
                tl.store(DX + row64 * dx_row_stride + c, dx.to(DX.dtype.element_ty), mask=col_mask)
                if WRITE_DR:
                    tl.store(DR_OUT + row64 * dr_out_row_stride + c, dx.to(DR_OUT.dtype.element_ty), mask=col_mask)
                if NEED_DW:
                    if ROUND_X_HAT:
                        x_hat = x_hat.to(x.dtype).to(tl.float32)
                    partial = tl.load(dw_row + c, mask=col_mask, other=0.0)
                    tl.store(dw_row + c, partial + dy * x_hat, mask=col_mask)
    else:
        col_mask = cols < n_cols
        if HAS_WEIGHT:
            w_eff = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32) + offset
        dw_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for block_start in range(row_start, row_end, BLOCK_M):
            rows, row_mask, rows64 = row_tile(block_start, row_end, BLOCK_M)
            mask = row_mask[:, None] & col_mask[None, :]
            x = tl.load(X + rows64 * x_row_stride + cols[None, :], mask=mask, other=0.0)
            dy = tl.load(DY + rows64 * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
            x_hat = x.to(tl.float32) * rstd[:, None]
            g = dy
            if HAS_WEIGHT:
                g = dy * w_eff[None, :]
            mean_gx = tl.sum(g * x_hat, axis=1) / n_cols
            dx = rstd[:, None] * (g - x_hat * mean_gx[:, None])
            if HAS_DRES:
                dres = tl.load(DRES + rows64 * dres_row_stride + cols[None, :], mask=mask, other=0.0)
                dx += dres.to(tl.float32)
            tl.store(DX + rows64 * dx_row_stride + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
            if WRITE_DR:
                tl.store(DR_OUT + rows64 * dr_out_row_stride + cols[None, :], dx.to(DR_OUT.dtype.element_ty), mask=mask)
            if NEED_DW:
                if ROUND_X_HAT:
                    x_hat = x_hat.to(x.dtype).to(tl.float32)
                dw_acc += tl.sum(dy * x_hat, axis=0)
        if NEED_DW:
            tl.store(dw_row + cols, dw_acc, mask=col_mask)


def rms_norm_forward(
    x2d: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    offset: float,
    casting_mode: str,
    plan: TilePlan,
    residual2d: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch the forward on rows of ``x2d`` (unit column stride); returns ``(y, rstd, s)`` where
    ``s`` is the normalised input: ``x2d``, or the new residual ``x2d + residual2d``."""
    n_rows, n_cols = x2d.shape
    has_residual = residual2d is not None
    y = torch.empty_like(x2d)
    s = torch.empty_like(x2d) if has_residual else x2d
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    if x2d.numel() == 0:
        return y, rstd, s
    r = residual2d if has_residual else x2d  # never read without HAS_RESIDUAL
    plan.launch(
        _rms_norm_forward_kernel,
        plan.row_grid(n_rows),
        x2d,
        r,
        weight if weight is not None else x2d,  # never read without HAS_WEIGHT
        y,
        s,
        rstd,
        x2d.stride(0),
        r.stride(0),
        y.stride(0),
        s.stride(0),
        n_rows,
        n_cols,
        eps,
        offset,
        HAS_WEIGHT=weight is not None,
        ROUND_X_HAT=_ROUND_X_HAT[casting_mode],
        HAS_RESIDUAL=has_residual,
        UNMASKED=not has_residual and not plan.chunked and n_cols == plan.block_n and n_rows % plan.block_m == 0,
    )
    return y, rstd, s


def rms_norm_backward(
    dy2d: torch.Tensor,
    x2d: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    offset: float,
    casting_mode: str,
    dx: torch.Tensor,
    plan: TilePlan,
    programs: int | None = None,
    need_dw: bool = True,
    dres2d: torch.Tensor | None = None,
    dr: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """Launch the backward: grad_x into ``dx`` (it may be ``dy2d``: in place); returns grad_weight
    (None without a weight or ``need_dw``). fused_add_rms_norm passes ``dres2d``, the new
    residual's incoming gradient (or None), and ``dr``, a buffer in the residual's dtype that
    receives grad_x too (None: grad_x is the residual's gradient)."""
    n_rows, n_cols = x2d.shape
    write_dr = dr is not None
    need_dw = need_dw and weight is not None
    programs, rows_per_program = backward_programs(n_rows, plan.block_m, x2d.device, programs)
    # fp32 partial grad_weight rows, one per program; chunked plans accumulate in place.
    alloc = torch.zeros if plan.chunked else torch.empty
    dw_partial = alloc((programs, n_cols), dtype=torch.float32, device=x2d.device) if need_dw else None
    if x2d.numel() > 0:
        dres = dres2d if dres2d is not None else dy2d  # never read without HAS_DRES
        dr_out = dr if write_dr else dx  # never written without WRITE_DR
        plan.launch(
            _rms_norm_backward_kernel,
            (programs,),
            dy2d,
            x2d,
            weight if weight is not None else x2d,
            rstd,
            dx,
            dw_partial if need_dw else rstd,
            dres,
            dr_out,
            dy2d.stride(0),
            x2d.stride(0),
            dx.stride(0),
            dres.stride(0) if dres2d is not None else 0,
            dr_out.stride(0),
            n_rows,
            n_cols,
            offset,
            rows_per_program,
            HAS_WEIGHT=weight is not None,
            NEED_DW=need_dw,
            ROUND_X_HAT=_ROUND_X_HAT[casting_mode],
            HAS_DRES=dres2d is not None,
            WRITE_DR=write_dr,
        )
    dw = None
    if need_dw:
        dw = torch.empty_like(weight)
        sum_partials(dw_partial, programs if n_rows else 0, dw, None, n_cols)
    return dw


class RMSNormKernels:
    """`liger_core.drivers.rms_norm.RMSNormKernels` on this module's kernels. The backward tiles
    are planned apart from the forward's (fused_add_rms_norm's with its own tile budget), so
    nothing passes from forward to backward (state None)."""

    protocol = rms_norm_driver.PROTOCOL

    @staticmethod
    def forward(x2d, weight, eps, offset, casting_mode):
        y, rstd, _ = rms_norm_forward(x2d, weight, eps, offset, casting_mode, plan_tiles(x2d.shape[1]))
        return y, rstd, None

    @staticmethod
    def backward(dy2d, x2d, weight, rstd, offset, casting_mode, dx, need_dw, state):
        plan = plan_tiles(x2d.shape[1], backward=True)
        return rms_norm_backward(dy2d, x2d, weight, rstd, offset, casting_mode, dx, plan, need_dw=need_dw)

    @staticmethod
    def fused_add_forward(x2d, residual2d, weight, eps, offset, casting_mode):
        plan = plan_tiles(x2d.shape[1])
        y, rstd, s = rms_norm_forward(x2d, weight, eps, offset, casting_mode, plan, residual2d)
        return y, s, rstd, None

    @staticmethod
    def fused_add_backward(dy2d, dres2d, s2d, weight, rstd, offset, casting_mode, dx, dr, need_dw, state):
        plan = plan_backward_tiles(s2d.shape[1], hardware.FUSED_ADD_RMS_NORM_BACKWARD_TILE_ELEMENTS)
        return rms_norm_backward(
            dy2d, s2d, weight, rstd, offset, casting_mode, dx, plan, need_dw=need_dw, dres2d=dres2d, dr=dr
        )


_FUNCTIONS = rms_norm_driver.autograd_functions(RMSNormKernels(), __name__)
LigerRMSNormFunction = implements("rms_norm")(_FUNCTIONS["rms_norm"])
LigerFusedAddRMSNormFunction = implements("fused_add_rms_norm")(_FUNCTIONS["fused_add_rms_norm"])
