"""Residual add + RMSNorm for NVIDIA GPUs: Triton kernels, launch plan and autograd Function.

Forward: one read of x and residual; the sum is rounded once to x's dtype, stored as the new
residual and normalised from registers (RMSNorm's tile plans and casting modes, see
rms_norm.py). Backward: one program per SM walks its rows and writes
grad_x = RMSNorm-backward(dy) + d(new_residual), which is also grad_residual (one buffer when
the dtypes agree, as autograd does for ``x + residual``); grad_weight from per-program fp32
rows summed in one launch.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_core.ops.fused_add_rms_norm import check_args
from liger_ops_cuda import hardware
from liger_ops_cuda._partials import as_rows, backward_programs, backward_row_plan, grad_rows, sum_partials
from liger_ops_cuda.rms_norm import _ROUND_X_HAT, plan_tiles


@triton.jit
def _fused_add_rms_norm_forward_kernel(
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
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CHUNKED: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    r64 = rows.to(tl.int64)[:, None]
    cols = tl.arange(0, BLOCK_N)

    if CHUNKED:
        # Pass 1 forms and stores the new residual and its sum of squares; pass 2 re-reads it.
        sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            m = row_mask[:, None] & (c < n_cols)[None, :]
            x = tl.load(X + r64 * x_row_stride + c[None, :], mask=m, other=0.0)
            r = tl.load(R + r64 * r_row_stride + c[None, :], mask=m, other=0.0)
            s = (x.to(tl.float32) + r.to(tl.float32)).to(S.dtype.element_ty)
            tl.store(S + r64 * s_row_stride + c[None, :], s, mask=m)
            sf = s.to(tl.float32)
            sum_sq += tl.sum(sf * sf, axis=1)
        rstd = tl.math.rsqrt(sum_sq / n_cols + eps)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            cm = c < n_cols
            m = row_mask[:, None] & cm[None, :]
            s = tl.load(S + r64 * s_row_stride + c[None, :], mask=m, other=0.0)
            s_hat = s.to(tl.float32) * rstd[:, None]
            if ROUND_X_HAT:
                s_hat = s_hat.to(s.dtype).to(tl.float32)
            if HAS_WEIGHT:
                s_hat = s_hat * (tl.load(W + c, mask=cm, other=0.0).to(tl.float32) + offset)[None, :]
            tl.store(Y + r64 * y_row_stride + c[None, :], s_hat.to(Y.dtype.element_ty), mask=m)
    else:
        cm = cols < n_cols
        m = row_mask[:, None] & cm[None, :]
        x = tl.load(X + r64 * x_row_stride + cols[None, :], mask=m, other=0.0, eviction_policy="evict_first")
        r = tl.load(R + r64 * r_row_stride + cols[None, :], mask=m, other=0.0, eviction_policy="evict_first")
        s = (x.to(tl.float32) + r.to(tl.float32)).to(S.dtype.element_ty)
        tl.store(S + r64 * s_row_stride + cols[None, :], s, mask=m)
        sf = s.to(tl.float32)
        rstd = tl.math.rsqrt(tl.sum(sf * sf, axis=1) / n_cols + eps)
        s_hat = sf * rstd[:, None]
        if ROUND_X_HAT:
            s_hat = s_hat.to(s.dtype).to(tl.float32)
        if HAS_WEIGHT:
            s_hat = s_hat * (tl.load(W + cols, mask=cm, other=0.0).to(tl.float32) + offset)[None, :]
        tl.store(Y + r64 * y_row_stride + cols[None, :], s_hat.to(Y.dtype.element_ty), mask=m)
    tl.store(RSTD + rows, rstd, mask=row_mask)


@triton.jit
def _fused_add_rms_norm_backward_kernel(
    DY,
    DS,
    S,
    W,
    RSTD,
    DX,
    DR,
    DW_PARTIAL,
    dy_row_stride,
    ds_row_stride,
    s_row_stride,
    dx_row_stride,
    dr_row_stride,
    n_rows,
    n_cols,
    offset,
    rows_per_program,
    HAS_WEIGHT: tl.constexpr,
    NEED_DW: tl.constexpr,
    HAS_DS: tl.constexpr,
    WRITE_DR: tl.constexpr,
    ROUND_X_HAT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CHUNKED: tl.constexpr,
):
    pid = tl.program_id(0)
    row_start = pid * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, n_rows)
    cols = tl.arange(0, BLOCK_N)
    dw_base = DW_PARTIAL + pid.to(tl.int64) * n_cols

    if CHUNKED:
        for i in range(0, row_end - row_start):
            r64 = (row_start + i).to(tl.int64)
            rstd = tl.load(RSTD + r64)
            dot = tl.zeros((BLOCK_N,), dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                cm = c < n_cols
                s = tl.load(S + r64 * s_row_stride + c, mask=cm, other=0.0).to(tl.float32)
                g = tl.load(DY + r64 * dy_row_stride + c, mask=cm, other=0.0).to(tl.float32)
                if HAS_WEIGHT:
                    g = g * (tl.load(W + c, mask=cm, other=0.0).to(tl.float32) + offset)
                dot += g * s
            mean_gs = tl.sum(dot, axis=0) * rstd / n_cols
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                cm = c < n_cols
                s = tl.load(S + r64 * s_row_stride + c, mask=cm, other=0.0)
                dy = tl.load(DY + r64 * dy_row_stride + c, mask=cm, other=0.0).to(tl.float32)
                s_hat = s.to(tl.float32) * rstd
                g = dy
                if HAS_WEIGHT:
                    g = dy * (tl.load(W + c, mask=cm, other=0.0).to(tl.float32) + offset)
                dx = rstd * (g - s_hat * mean_gs)
                if HAS_DS:
                    dx += tl.load(DS + r64 * ds_row_stride + c, mask=cm, other=0.0).to(tl.float32)
                tl.store(DX + r64 * dx_row_stride + c, dx.to(DX.dtype.element_ty), mask=cm)
                if WRITE_DR:
                    tl.store(DR + r64 * dr_row_stride + c, dx.to(DR.dtype.element_ty), mask=cm)
                if NEED_DW:
                    if ROUND_X_HAT:
                        s_hat = s_hat.to(s.dtype).to(tl.float32)
                    tl.store(dw_base + c, tl.load(dw_base + c, mask=cm, other=0.0) + dy * s_hat, mask=cm)
    else:
        cm = cols < n_cols
        if HAS_WEIGHT:
            w_eff = tl.load(W + cols, mask=cm, other=0.0).to(tl.float32) + offset
        dw_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for block_start in range(row_start, row_end, BLOCK_M):
            rows = block_start + tl.arange(0, BLOCK_M)
            row_mask = rows < row_end
            r64 = rows.to(tl.int64)[:, None]
            m = row_mask[:, None] & cm[None, :]
            s = tl.load(S + r64 * s_row_stride + cols[None, :], mask=m, other=0.0)
            dy = tl.load(DY + r64 * dy_row_stride + cols[None, :], mask=m, other=0.0).to(tl.float32)
            rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
            s_hat = s.to(tl.float32) * rstd[:, None]
            g = dy
            if HAS_WEIGHT:
                g = dy * w_eff[None, :]
            mean_gs = tl.sum(g * s_hat, axis=1) / n_cols
            dx = rstd[:, None] * (g - s_hat * mean_gs[:, None])
            if HAS_DS:
                dx += tl.load(DS + r64 * ds_row_stride + cols[None, :], mask=m, other=0.0).to(tl.float32)
            tl.store(DX + r64 * dx_row_stride + cols[None, :], dx.to(DX.dtype.element_ty), mask=m)
            if WRITE_DR:
                tl.store(DR + r64 * dr_row_stride + cols[None, :], dx.to(DR.dtype.element_ty), mask=m)
            if NEED_DW:
                if ROUND_X_HAT:
                    s_hat = s_hat.to(s.dtype).to(tl.float32)
                dw_acc += tl.sum(dy * s_hat, axis=0)
        if NEED_DW:
            tl.store(dw_base + cols, dw_acc, mask=cm)


def fused_add_rms_norm_forward(x2d, r2d, weight, eps, offset, casting_mode, plan):
    n_rows, n_cols = x2d.shape
    y = torch.empty_like(x2d)
    s = torch.empty_like(x2d)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    if n_rows == 0 or n_cols == 0:
        return y, s, rstd
    _fused_add_rms_norm_forward_kernel[(triton.cdiv(n_rows, plan.block_m),)](
        x2d,
        r2d,
        weight if weight is not None else x2d,
        y,
        s,
        rstd,
        x2d.stride(0),
        r2d.stride(0),
        y.stride(0),
        s.stride(0),
        n_rows,
        n_cols,
        eps,
        offset,
        HAS_WEIGHT=weight is not None,
        ROUND_X_HAT=_ROUND_X_HAT[casting_mode],
        BLOCK_M=plan.block_m,
        BLOCK_N=plan.block_n,
        CHUNKED=plan.chunked,
        num_warps=plan.num_warps,
    )
    return y, s, rstd


def fused_add_rms_norm_backward(
    dy2d, ds2d, s2d, weight, rstd, offset, casting_mode, in_place, residual_dtype, plan, need_dw=True, programs=None
):
    """Returns ``(grad_x, grad_residual, grad_weight)``; ``ds2d`` may be None."""
    n_rows, n_cols = s2d.shape
    dx = dy2d if in_place else torch.empty_like(s2d)
    write_dr = residual_dtype != s2d.dtype
    dr = torch.empty(s2d.shape, dtype=residual_dtype, device=s2d.device) if write_dr else dx
    need_dw = need_dw and weight is not None
    programs, rows_per_program = backward_programs(n_rows, plan.block_m, s2d.device, programs)
    alloc = torch.zeros if plan.chunked else torch.empty
    dw_partial = alloc((programs, n_cols), dtype=torch.float32, device=s2d.device) if need_dw else None
    if n_rows > 0 and n_cols > 0:
        _fused_add_rms_norm_backward_kernel[(programs,)](
            dy2d,
            ds2d if ds2d is not None else dy2d,
            s2d,
            weight if weight is not None else s2d,
            rstd,
            dx,
            dr,
            dw_partial if need_dw else rstd,
            dy2d.stride(0),
            ds2d.stride(0) if ds2d is not None else 0,
            s2d.stride(0),
            dx.stride(0),
            dr.stride(0),
            n_rows,
            n_cols,
            offset,
            rows_per_program,
            HAS_WEIGHT=weight is not None,
            NEED_DW=need_dw,
            HAS_DS=ds2d is not None,
            WRITE_DR=write_dr,
            ROUND_X_HAT=_ROUND_X_HAT[casting_mode],
            BLOCK_M=plan.block_m,
            BLOCK_N=plan.block_n,
            CHUNKED=plan.chunked,
            num_warps=plan.num_warps,
        )
    dw = None
    if need_dw:
        dw = torch.empty_like(weight)
        if n_rows == 0:
            dw_partial.zero_()
        sum_partials(dw_partial, programs, dw, None, n_cols)
    return dx, dr, dw


class LigerFusedAddRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, residual, weight, eps, offset, casting_mode, in_place):
        check_args(x, residual, weight, eps, offset, casting_mode)
        x2d, r2d = as_rows(x), as_rows(residual)
        y, s, rstd = fused_add_rms_norm_forward(x2d, r2d, weight, eps, offset, casting_mode, plan_tiles(x.shape[-1]))
        ctx.save_for_backward(s, weight, rstd)
        ctx.offset, ctx.casting_mode, ctx.in_place = offset, casting_mode, in_place
        ctx.residual_dtype = residual.dtype
        # An unused new_residual gets no gradient (None) instead of a materialised zero tensor.
        ctx.set_materialize_grads(False)
        return y.view(x.shape), s.view(x.shape)

    @staticmethod
    def backward(ctx, dy, ds):
        s2d, weight, rstd = ctx.saved_tensors
        shape = dy.shape if dy is not None else ds.shape
        if dy is None:
            # Only new_residual was used: its gradient passes straight to x and residual.
            dx = ds.to(s2d.dtype)
            return dx, ds.to(ctx.residual_dtype), None, None, None, None, None
        dy2d = grad_rows(dy, s2d.shape)
        # In place needs a dense buffer of its own rows (a broadcast gradient would alias).
        if ctx.in_place and not dy2d.is_contiguous():
            dy2d = dy2d.contiguous()
        ds2d = grad_rows(ds, s2d.shape) if ds is not None else None
        plan = backward_row_plan(s2d.shape[1], hardware.FUSED_ADD_RMS_NORM_BACKWARD_TILE_ELEMENTS)
        dx, dr, dw = fused_add_rms_norm_backward(
            dy2d,
            ds2d,
            s2d,
            weight,
            rstd,
            ctx.offset,
            ctx.casting_mode,
            ctx.in_place,
            ctx.residual_dtype,
            plan,
            ctx.needs_input_grad[2],
        )
        return dx.view(shape), dr.view(shape), dw, None, None, None, None


def fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    # Arguments are checked inside the Function, so calling it directly is just as safe.
    return LigerFusedAddRMSNormFunction.apply(x, residual, weight, eps, offset, casting_mode, in_place)
