"""RMSNorm and fused add + RMSNorm for Intel GPUs: Triton kernels, launch plans and the kernel
adapter of `liger_core.drivers.rms_norm` (fused_add_rms_norm is the same kernels with
HAS_RESIDUAL / HAS_DS on).

Forward: one program per tile of BLOCK_M rows (several short rows per tile, one row per
tile, or a wide row in N_CHUNKS pieces of BLOCK_N columns, read twice) stores the output
and the fp32 reciprocal RMS for backward.

Backward: a persistent grid sized by the EU count (as many programs as are resident at once,
never more than there are tiles). Each program walks a contiguous run of tiles, writes
grad_x and accumulates grad_weight in fp32 (registers when a row fits, its own row of the
partial buffer when rows are chunked). The per-program partial rows are summed once at the
end: no atomics, deterministic.

Interpreter note: the Triton interpreter of triton-xpu 3.3 hands int arguments to kernels as
1-element arrays (and turns every assigned value into one), which ``range`` only accepts with
a NumPy deprecation (an error from NumPy 2.4). So loop trip counts are constexpr where the
hidden size fixes them (N_CHUNKS), and the per-program tile count is a runtime int on the
device (no recompiles as token counts change) but the constexpr STATIC_TILES in the
interpreter, chosen inline in the ``range`` call.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import rms_norm as rms_norm_driver

from liger_ops_xpu._jit import add_to_partial, col_tile, row_group, row_tile
from liger_ops_xpu._tiling import (
    TilePlan,
    backward_grid,
    launch_row_tiles,
    partial_rows,
    plan_tiles,
    static_trips,
    sum_partials,
    zeros_or_none,
)

# casting_mode -> whether x_hat is rounded to x.dtype before the weight multiply
# ("llama" and "none" round; "gemma" stays in fp32 throughout).
_ROUND_X_HAT = {"llama": True, "none": True, "gemma": False}


@triton.jit
def _scaled_x_hat(x, rstd, W, cols, n_cols, offset, HAS_WEIGHT: tl.constexpr, ROUND_X_HAT: tl.constexpr):
    """Forward output of a [BLOCK_M, BLOCK_N] tile in fp32: x * rstd, rounded like the model, times (w + offset)."""
    x_hat = x.to(tl.float32) * rstd[:, None]
    if ROUND_X_HAT:
        x_hat = x_hat.to(x.dtype).to(tl.float32)
    if HAS_WEIGHT:
        w = tl.load(W + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        x_hat = x_hat * (w + offset)[None, :]
    return x_hat


@triton.jit
def _load_input(x_ptrs, r_ptrs, mask, HAS_RESIDUAL: tl.constexpr):
    """The normalised input: x, or (x + residual) summed in fp32 and rounded once to x's dtype."""
    x = tl.load(x_ptrs, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(r_ptrs, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)
    return x


@triton.jit
def _store_grad_x(
    dx, DX, DS, DR, rows64, cols, mask, dx_row_stride, ds_row_stride, dr_row_stride, HAS_DS: tl.constexpr
):
    """Store a tile of grad_x; with HAS_DS the new residual's incoming gradient is added first and
    the sum is also stored to DR (the residual's gradient)."""
    if HAS_DS:
        dx += tl.load(DS + rows64[:, None] * ds_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        tl.store(DR + rows64[:, None] * dr_row_stride + cols[None, :], dx.to(DR.dtype.element_ty), mask=mask)
    tl.store(DX + rows64[:, None] * dx_row_stride + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)


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
    N_CHUNKS: tl.constexpr,
):
    # HAS_RESIDUAL (fused_add_rms_norm): the row is s = x + r, stored to S as the new residual.
    pid = tl.program_id(0)
    rows, row_mask, rows64 = row_tile(pid * BLOCK_M, n_rows, BLOCK_M)
    x_base = X + rows64[:, None] * x_row_stride
    r_base = R + rows64[:, None] * r_row_stride
    s_base = S + rows64[:, None] * s_row_stride
    y_base = Y + rows64[:, None] * y_row_stride

    if N_CHUNKS == 1:
        # The whole row is in the tile: one read of x.
        cols, mask = col_tile(0, n_cols, row_mask, BLOCK_N)
        x = _load_input(x_base + cols[None, :], r_base + cols[None, :], mask, HAS_RESIDUAL)
        if HAS_RESIDUAL:
            tl.store(s_base + cols[None, :], x, mask=mask)
        xf = x.to(tl.float32)
        rstd = tl.math.rsqrt(tl.sum(xf * xf, axis=1) / n_cols + eps)
        y = _scaled_x_hat(x, rstd, W, cols, n_cols, offset, HAS_WEIGHT, ROUND_X_HAT)
        tl.store(y_base + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    else:
        # Wide rows: a pass for the mean square, a pass that writes the output.
        sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for chunk in range(N_CHUNKS):
            c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
            x = _load_input(x_base + c[None, :], r_base + c[None, :], mask, HAS_RESIDUAL)
            if HAS_RESIDUAL:
                tl.store(s_base + c[None, :], x, mask=mask)
            xf = x.to(tl.float32)
            sum_sq += tl.sum(xf * xf, axis=1)
        rstd = tl.math.rsqrt(sum_sq / n_cols + eps)
        for chunk in range(N_CHUNKS):
            c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
            # Recomputed rather than read back from S: no ordering between this program's own
            # store and load is promised.
            x = _load_input(x_base + c[None, :], r_base + c[None, :], mask, HAS_RESIDUAL)
            y = _scaled_x_hat(x, rstd, W, c, n_cols, offset, HAS_WEIGHT, ROUND_X_HAT)
            tl.store(y_base + c[None, :], y.to(Y.dtype.element_ty), mask=mask)
    tl.store(RSTD + rows, rstd, mask=row_mask)


@triton.jit
def _rms_norm_backward_kernel(
    DY,
    X,
    W,
    RSTD,
    DX,
    DW_PARTIAL,
    DS,
    DR,
    dy_row_stride,
    x_row_stride,
    dx_row_stride,
    ds_row_stride,
    dr_row_stride,
    n_rows,
    n_cols,
    offset,
    tiles_per_program,
    HAS_WEIGHT: tl.constexpr,
    ROUND_X_HAT: tl.constexpr,
    HAS_DS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    N_CHUNKS: tl.constexpr,
    STATIC_TILES: tl.constexpr,
):
    # HAS_DS (fused_add_rms_norm): the incoming gradient of the new residual is added to grad_x,
    # which is stored twice: DX (x's dtype) and DR (the residual's gradient, its own buffer so
    # that no later in-place backward can change one through the other).
    # grad_x = rstd * (g - x_hat * mean(g * x_hat)), g = dy * (w + offset);
    # grad_w = sum over rows of dy * x_hat (x_hat rounded to x.dtype where the forward rounded it).
    # The tile loop's bound is chosen inline (not assigned) because the interpreter would turn an
    # assigned int into an array.
    pid, first_row = row_group(tiles_per_program, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dw_base = DW_PARTIAL + pid.to(tl.int64) * n_cols

    if N_CHUNKS == 1:
        col_mask = cols < n_cols
        if HAS_WEIGHT:
            w_eff = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32) + offset
        dw_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for t in range(STATIC_TILES if STATIC_TILES > 0 else tiles_per_program):
            rows, row_mask, rows64 = row_tile(first_row + t * BLOCK_M, n_rows, BLOCK_M)
            mask = row_mask[:, None] & col_mask[None, :]
            x = tl.load(X + rows64[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0)
            dy = tl.load(DY + rows64[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
            x_hat = x.to(tl.float32) * rstd[:, None]
            g = dy
            if HAS_WEIGHT:
                g = dy * w_eff[None, :]
            mean_gx = tl.sum(g * x_hat, axis=1) / n_cols
            dx = rstd[:, None] * (g - x_hat * mean_gx[:, None])
            _store_grad_x(dx, DX, DS, DR, rows64, cols, mask, dx_row_stride, ds_row_stride, dr_row_stride, HAS_DS)
            if HAS_WEIGHT:
                if ROUND_X_HAT:
                    x_hat = x_hat.to(x.dtype).to(tl.float32)
                dw_acc += tl.sum(dy * x_hat, axis=0)
        if HAS_WEIGHT:
            tl.store(dw_base + cols, dw_acc, mask=col_mask)
    else:
        # Wide rows: pass 1 gives each row's sum(g * x); pass 2 writes grad_x chunk by chunk and
        # adds the chunk's grad_weight to this program's partial row (only this program touches it).
        for t in range(STATIC_TILES if STATIC_TILES > 0 else tiles_per_program):
            rows, row_mask, rows64 = row_tile(first_row + t * BLOCK_M, n_rows, BLOCK_M)
            x_base = X + rows64[:, None] * x_row_stride
            dy_base = DY + rows64[:, None] * dy_row_stride
            rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
            dot = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for chunk in range(N_CHUNKS):
                c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
                xf = tl.load(x_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
                g = tl.load(dy_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
                if HAS_WEIGHT:
                    g = g * (tl.load(W + c, mask=c < n_cols, other=0.0).to(tl.float32) + offset)[None, :]
                dot += g * xf
            mean_gx = tl.sum(dot, axis=1) * rstd / n_cols
            for chunk in range(N_CHUNKS):
                c, mask = col_tile(chunk, n_cols, row_mask, BLOCK_N)
                x = tl.load(x_base + c[None, :], mask=mask, other=0.0)
                dy = tl.load(dy_base + c[None, :], mask=mask, other=0.0).to(tl.float32)
                x_hat = x.to(tl.float32) * rstd[:, None]
                g = dy
                if HAS_WEIGHT:
                    g = dy * (tl.load(W + c, mask=c < n_cols, other=0.0).to(tl.float32) + offset)[None, :]
                dx = rstd[:, None] * (g - x_hat * mean_gx[:, None])
                _store_grad_x(dx, DX, DS, DR, rows64, c, mask, dx_row_stride, ds_row_stride, dr_row_stride, HAS_DS)
                if HAS_WEIGHT:
                    if ROUND_X_HAT:
                        x_hat = x_hat.to(x.dtype).to(tl.float32)
                    add_to_partial(dw_base, c, n_cols, tl.sum(dy * x_hat, axis=0))


def rms_norm_forward(
    x2d: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    offset: float,
    casting_mode: str,
    plan: TilePlan,
    residual2d: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch the forward kernel on rows of ``x2d`` (unit column stride); returns ``(y, rstd, s)``
    where ``s`` is the normalised input: ``x2d``, or the new residual ``x2d + residual2d``."""
    n_rows, n_cols = x2d.shape
    has_residual = residual2d is not None
    y = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device)
    s = torch.empty_like(y) if has_residual else x2d
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    if x2d.numel() == 0:
        return y, rstd, s
    r = residual2d if has_residual else x2d  # never read without HAS_RESIDUAL
    launch_row_tiles(
        _rms_norm_forward_kernel,
        plan.tiles(n_rows),
        plan,
        x2d.device,
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
    ds2d: torch.Tensor | None = None,
    dr: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """Launch the backward kernel: grad_x into ``dx`` (it may be ``dy2d``: in place); returns
    grad_weight. ``ds2d``, the gradient of fused_add_rms_norm's new residual, is added to grad_x,
    which is then also written to ``dr`` (the residual's gradient in its dtype; None: grad_x is it)."""
    n_rows, n_cols = x2d.shape
    has_weight = weight is not None
    has_ds = ds2d is not None
    if x2d.numel() == 0:
        return zeros_or_none(weight)
    programs, tiles_per_program = backward_grid(n_rows, plan, x2d.device)
    # One fp32 partial row per program (rstd stands in without HAS_WEIGHT: never written).
    dw_partial = partial_rows(programs, n_cols, plan, x2d.device) if has_weight else rstd
    ds = ds2d if has_ds else dy2d  # never read without HAS_DS
    launch_row_tiles(
        _rms_norm_backward_kernel,
        programs,
        plan,
        x2d.device,
        dy2d,
        x2d,
        weight if has_weight else x2d,
        rstd,
        dx,
        dw_partial,
        ds,
        dr if has_ds and dr is not None else dx,  # written only with HAS_DS
        dy2d.stride(0),
        x2d.stride(0),
        dx.stride(0),
        ds.stride(0),
        dr.stride(0) if has_ds and dr is not None else dx.stride(0),
        n_rows,
        n_cols,
        offset,
        tiles_per_program,
        HAS_WEIGHT=has_weight,
        ROUND_X_HAT=_ROUND_X_HAT[casting_mode],
        HAS_DS=has_ds,
        STATIC_TILES=static_trips(_rms_norm_backward_kernel, tiles_per_program),
    )
    if dr is not None and not has_ds:  # the kernel stored grad_x only
        dr.copy_(dx)
    return sum_partials(dw_partial, weight)


class RMSNormKernels:
    """`liger_core.drivers.rms_norm.RMSNormKernels` on this module's kernels; the forward's tile
    plan is the backward's ``state`` (one plan per hidden size and device)."""

    protocol = rms_norm_driver.PROTOCOL

    @staticmethod
    def forward(x2d, weight, eps, offset, casting_mode):
        plan = plan_tiles(x2d.shape[1], x2d.device)
        y, rstd, _ = rms_norm_forward(x2d, weight, eps, offset, casting_mode, plan)
        return y, rstd, plan

    @staticmethod
    def backward(dy2d, x2d, weight, rstd, offset, casting_mode, dx, need_dw, state):
        return rms_norm_backward(dy2d, x2d, weight, rstd, offset, casting_mode, dx, state)

    @staticmethod
    def fused_add_forward(x2d, residual2d, weight, eps, offset, casting_mode):
        plan = plan_tiles(x2d.shape[1], x2d.device)
        y, rstd, s = rms_norm_forward(x2d, weight, eps, offset, casting_mode, plan, residual2d)
        return y, s, rstd, plan

    @staticmethod
    def fused_add_backward(dy2d, dres2d, s2d, weight, rstd, offset, casting_mode, dx, dr, need_dw, state):
        return rms_norm_backward(dy2d, s2d, weight, rstd, offset, casting_mode, dx, state, dres2d, dr)


_FUNCTIONS = rms_norm_driver.autograd_functions(RMSNormKernels(), __name__)
LigerRMSNormFunction = implements("rms_norm")(_FUNCTIONS["rms_norm"])
LigerFusedAddRMSNormFunction = implements("fused_add_rms_norm")(_FUNCTIONS["fused_add_rms_norm"])
