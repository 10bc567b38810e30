"""RMSNorm and residual add + RMSNorm for NVIDIA GPUs: Triton kernels, launch and autograd Functions.

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
from liger_core.ops.fused_add_rms_norm import check_args as check_fused_add_args
from liger_core.ops.rms_norm import check_args
from liger_ops_cuda import hardware
from liger_ops_cuda._jit import row_group, row_tile
from liger_ops_cuda._tiling import (
    TilePlan,
    as_rows,
    backward_programs,
    grad_rows,
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
    in_place: bool,
    plan: TilePlan,
    programs: int | None = None,
    need_dw: bool = True,
    dres2d: torch.Tensor | None = None,
    residual_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Launch the backward; returns ``(grad_x, grad_weight, grad_residual)`` (grad_x in ``dy2d``
    when in_place). fused_add_rms_norm passes ``residual_dtype`` (grad_residual is grad_x, or a
    copy in that dtype) and ``dres2d``, the new residual's incoming gradient, or None."""
    n_rows, n_cols = x2d.shape
    dx = dy2d if in_place else torch.empty_like(x2d)
    write_dr = residual_dtype is not None and residual_dtype != x2d.dtype
    dr = torch.empty(x2d.shape, dtype=residual_dtype, device=x2d.device) if write_dr else dx
    need_dw = need_dw and weight is not None
    programs, rows_per_program = backward_programs(n_rows, plan.block_m, x2d.device, programs)
    # fp32 partial grad_weight rows, one per program; chunked plans accumulate in place.
    alloc = torch.zeros if plan.chunked else torch.empty
    dw_partial = alloc((programs, n_cols), dtype=torch.float32, device=x2d.device) if need_dw else None
    if x2d.numel() > 0:
        dres = dres2d if dres2d is not None else dy2d  # never read without HAS_DRES
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
            dr,
            dy2d.stride(0),
            x2d.stride(0),
            dx.stride(0),
            dres.stride(0) if dres2d is not None else 0,
            dr.stride(0),
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
    return dx, dw, (dr if residual_dtype is not None else None)


def _incoming_rows(dy: torch.Tensor, shape: torch.Size, in_place: bool) -> torch.Tensor:
    dy2d = grad_rows(dy, shape)
    # In place needs a dense buffer of its own rows: a gradient broadcast over rows (row
    # stride 0) would alias, so it is copied first.
    return dy2d.contiguous() if in_place and not dy2d.is_contiguous() else dy2d


@implements("rms_norm")
class LigerRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps, offset, casting_mode, in_place):
        check_args(x, weight, eps, offset, casting_mode, in_place)
        x2d = as_rows(x)
        y, rstd, _ = rms_norm_forward(x2d, weight, eps, offset, casting_mode, plan_tiles(x.shape[-1]))
        ctx.save_for_backward(x2d, weight, rstd)
        ctx.offset, ctx.casting_mode, ctx.in_place = offset, casting_mode, in_place
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x2d, weight, rstd = ctx.saved_tensors
        dy2d = _incoming_rows(dy, x2d.shape, ctx.in_place)
        plan = plan_tiles(x2d.shape[1], backward=True)
        dx, dw, _ = rms_norm_backward(dy2d, x2d, weight, rstd, ctx.offset, ctx.casting_mode, ctx.in_place, plan)
        return dx.view(dy.shape), dw, None, None, None, None


@implements("fused_add_rms_norm")
class LigerFusedAddRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, residual, weight, eps, offset, casting_mode, in_place):
        check_fused_add_args(x, residual, weight, eps, offset, casting_mode, in_place)
        plan = plan_tiles(x.shape[-1])
        y, rstd, s = rms_norm_forward(as_rows(x), weight, eps, offset, casting_mode, plan, as_rows(residual))
        ctx.save_for_backward(s, weight, rstd)
        ctx.offset, ctx.casting_mode, ctx.in_place = offset, casting_mode, in_place
        ctx.residual_dtype = residual.dtype
        # An unused new_residual gets no gradient (None) instead of a materialised zero tensor.
        ctx.set_materialize_grads(False)
        return y.view(x.shape), s.view(x.shape)

    @staticmethod
    def backward(ctx, dy, dres):
        s2d, weight, rstd = ctx.saved_tensors
        shape = dy.shape if dy is not None else dres.shape
        if dy is None:
            # Only new_residual was used: its gradient passes straight to x and residual.
            return dres.to(s2d.dtype), dres.to(ctx.residual_dtype), None, None, None, None, None
        dy2d = _incoming_rows(dy, s2d.shape, ctx.in_place)
        dres2d = grad_rows(dres, s2d.shape) if dres is not None else None
        plan = plan_backward_tiles(s2d.shape[1], hardware.FUSED_ADD_RMS_NORM_BACKWARD_TILE_ELEMENTS)
        dx, dw, dr = rms_norm_backward(
            dy2d,
            s2d,
            weight,
            rstd,
            ctx.offset,
            ctx.casting_mode,
            ctx.in_place,
            plan,
            need_dw=ctx.needs_input_grad[2],
            dres2d=dres2d,
            residual_dtype=ctx.residual_dtype,
        )
        return dx.view(shape), dr.view(shape), dw, None, None, None, None
