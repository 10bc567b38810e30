"""Modulated RMSNorm (``(1 + scale) * RMSNorm(x) + shift``, DiT's AdaLN norm) for NVIDIA GPUs:
Triton kernels, launch plans and the kernel adapter of `liger_core.drivers.modulated_rms_norm`.

One fused kernel per direction, on the norms' tile plans (`_tiling.plan_tiles` forward, its
backward tiles at sizes of its own).

Forward: each program normalises BLOCK_M rows (or one wide row in BLOCK_N-wide chunks, two
passes), rounds the normalised row to x's dtype as rms_norm does, and modulates it with its
scale and shift row (row i uses modulation row ``i // rows_per_modulation``) in fp32 before the
one rounding of y; it stores the fp32 reciprocal RMS for backward. Nothing else is saved: the
backward recomputes the normalised row from x and rstd (bit-identical: the same fp32 ops).

Backward: a persistent grid of work units. A unit is one chunk of the rows of one modulation
row (few modulation rows: each is split into chunks so that every SM has work), or several
whole modulation rows (many of them, e.g. one per token). A unit writes grad_x, keeps
grad_weight's fp32 partial row in registers, and sums ``dy * rms_norm(x)`` (grad_scale) and
``dy`` (grad_shift) over each modulation row's rows it owns. The partial rows are reduced once
after the kernel (no atomics, deterministic); a modulation row owned whole by one unit is
written straight in its final dtype.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.drivers import modulated_rms_norm as modulated_rms_norm_driver
from liger_ops_cuda import hardware
from liger_ops_cuda._jit import row_tile
from liger_ops_cuda._tiling import TilePlan, plan_norm_rows, plan_tiles, sum_partials
from liger_ops_cuda.rms_norm import _ROUND_X_HAT


@triton.jit
def _normed(x, rstd, w_eff, HAS_WEIGHT: tl.constexpr, ROUND_X_HAT: tl.constexpr):
    """``(r, x_hat)``: rms_norm's output in fp32 as it rounds it to x's dtype, and x_hat (fp32,
    rounded to x's dtype where the casting mode rounds it: grad_weight's factor)."""
    x_hat = x.to(tl.float32) * rstd
    if ROUND_X_HAT:
        x_hat = x_hat.to(x.dtype).to(tl.float32)
    r = x_hat
    if HAS_WEIGHT:
        r = x_hat * w_eff
    return r.to(x.dtype).to(tl.float32), x_hat


@triton.jit
def _as_int64(index, base):
    """A loop index over ``range(base, ...)`` in int64 (row offsets pass 2**31 at large sizes); the
    interpreter's loop index is a Python int, so it is formed from ``base``, a tensor in both."""
    return base.to(tl.int64) + (index - base)


@triton.jit
def _modulated_rms_norm_forward_kernel(
    X, W, SCALE, SHIFT, Y, RSTD, x_row_stride, y_row_stride, n_rows, n_cols, rows_per_modulation, eps, offset,
    HAS_WEIGHT: tl.constexpr, HAS_SHIFT: tl.constexpr, ROUND_X_HAT: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, CHUNKED: tl.constexpr,
):  # fmt: skip
    rows, row_mask, rows64 = row_tile(tl.program_id(0) * BLOCK_M, n_rows, BLOCK_M)
    # Each row's modulation row (scale and shift are contiguous (M, n_cols)).
    mod_rows64 = (rows // rows_per_modulation).to(tl.int64)[:, None] * n_cols
    x_rows = X + rows64 * x_row_stride
    y_rows = Y + rows64 * y_row_stride
    cols = tl.arange(0, BLOCK_N)
    if CHUNKED:
        # Pass 1: the mean square; pass 2 re-reads the row (from L2) and writes y.
        sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_mask[:, None] & (c < n_cols)[None, :]
            xf = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
            sum_sq += tl.sum(xf * xf, axis=1)
        rstd = tl.math.rsqrt(sum_sq / n_cols + eps)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            col_mask = c < n_cols
            mask = row_mask[:, None] & col_mask[None, :]
            x = tl.load(x_rows + c[None, :], mask=mask, other=0.0)
            w_eff = 0.0  # read only with HAS_WEIGHT
            if HAS_WEIGHT:
                w_eff = (tl.load(W + c, mask=col_mask, other=0.0).to(tl.float32) + offset)[None, :]
            r, _ = _normed(x, rstd[:, None], w_eff, HAS_WEIGHT, ROUND_X_HAT)
            y = r * (1.0 + tl.load(SCALE + mod_rows64 + c[None, :], mask=mask, other=0.0).to(tl.float32))
            if HAS_SHIFT:
                y += tl.load(SHIFT + mod_rows64 + c[None, :], mask=mask, other=0.0).to(tl.float32)
            tl.store(y_rows + c[None, :], y.to(Y.dtype.element_ty), mask=mask)
    else:
        col_mask = cols < n_cols
        mask = row_mask[:, None] & col_mask[None, :]
        # x is streamed (evict_first) so it does not push the shared scale/shift rows out of L2.
        x = tl.load(x_rows + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
        xf = x.to(tl.float32)
        rstd = tl.math.rsqrt(tl.sum(xf * xf, axis=1) / n_cols + eps)
        w_eff = 0.0  # read only with HAS_WEIGHT
        if HAS_WEIGHT:
            w_eff = (tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32) + offset)[None, :]
        r, _ = _normed(x, rstd[:, None], w_eff, HAS_WEIGHT, ROUND_X_HAT)
        y = r * (1.0 + tl.load(SCALE + mod_rows64 + cols[None, :], mask=mask, other=0.0).to(tl.float32))
        if HAS_SHIFT:
            y += tl.load(SHIFT + mod_rows64 + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        tl.store(y_rows + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    tl.store(RSTD + rows, rstd, mask=row_mask)


@triton.jit
def _modulated_rms_norm_backward_kernel(
    DY, X, W, SCALE, RSTD, DX, DW_PARTIAL, DSCALE, DSHIFT, dy_row_stride, x_row_stride, dx_row_stride, n_mod_rows,
    n_cols, offset, rows_per_modulation, rows_per_chunk, n_chunks, mod_rows_per_unit, HAS_WEIGHT: tl.constexpr,
    NEED_DW: tl.constexpr, HAS_SHIFT: tl.constexpr, ROUND_X_HAT: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, CHUNKED: tl.constexpr,
):  # fmt: skip
    # g = dy * (1 + scale) is the normalisation's incoming gradient:
    # grad_x = rstd * (g * w - x_hat * mean(g * w * x_hat)), grad_w = sum g * x_hat,
    # grad_scale = sum dy * r (r: rms_norm's rounded output), grad_shift = sum dy.
    # Unit u owns chunk (u % n_chunks) of modulation rows [first_mod, last_mod); its partial
    # grad_scale / grad_shift rows go to slot mod * n_chunks + chunk, grad_weight's to row u.
    unit = tl.program_id(0)
    chunk = unit % n_chunks
    first_mod = (unit // n_chunks) * mod_rows_per_unit
    last_mod = tl.minimum(first_mod + mod_rows_per_unit, n_mod_rows)
    cols = tl.arange(0, BLOCK_N)
    dw_row = DW_PARTIAL + unit.to(tl.int64) * n_cols

    if CHUNKED:
        # Wide rows, one at a time: a pass for the row's dot product, a pass that writes grad_x and
        # adds to the unit's partial rows in memory (each slot belongs to this unit alone).
        for mod in range(first_mod, last_mod):
            scale_row = SCALE + _as_int64(mod, first_mod) * n_cols
            slot = (mod * n_chunks + chunk).to(tl.int64) * n_cols
            row_start = mod * rows_per_modulation + chunk * rows_per_chunk
            row_end = tl.minimum(row_start + rows_per_chunk, (mod + 1) * rows_per_modulation)
            for i in range(0, row_end - row_start):
                row64 = (row_start + i).to(tl.int64)
                rstd = tl.load(RSTD + row64)
                dot = tl.zeros((BLOCK_N,), dtype=tl.float32)
                for start in range(0, n_cols, BLOCK_N):
                    c = start + cols
                    col_mask = c < n_cols
                    x = tl.load(X + row64 * x_row_stride + c, mask=col_mask, other=0.0).to(tl.float32)
                    g = tl.load(DY + row64 * dy_row_stride + c, mask=col_mask, other=0.0).to(tl.float32)
                    g = g * (1.0 + tl.load(scale_row + c, mask=col_mask, other=0.0).to(tl.float32))
                    if HAS_WEIGHT:
                        g = g * (tl.load(W + c, mask=col_mask, other=0.0).to(tl.float32) + offset)
                    dot += g * x
                mean_gx = tl.sum(dot, axis=0) * rstd / n_cols
                for start in range(0, n_cols, BLOCK_N):
                    c = start + cols
                    col_mask = c < n_cols
                    x = tl.load(X + row64 * x_row_stride + c, mask=col_mask, other=0.0)
                    dy = tl.load(DY + row64 * dy_row_stride + c, mask=col_mask, other=0.0).to(tl.float32)
                    g = dy * (1.0 + tl.load(scale_row + c, mask=col_mask, other=0.0).to(tl.float32))
                    w_eff = 0.0  # read only with HAS_WEIGHT
                    g_w = g
                    if HAS_WEIGHT:
                        w_eff = tl.load(W + c, mask=col_mask, other=0.0).to(tl.float32) + offset
                        g_w = g * w_eff
                    dx = rstd * (g_w - x.to(tl.float32) * rstd * mean_gx)
                    tl.store(DX + row64 * dx_row_stride + c, dx.to(DX.dtype.element_ty), mask=col_mask)
                    r, x_hat = _normed(x, rstd, w_eff, HAS_WEIGHT, ROUND_X_HAT)
                    if NEED_DW:
                        partial = tl.load(dw_row + c, mask=col_mask, other=0.0)
                        tl.store(dw_row + c, partial + g * x_hat, mask=col_mask)
                    partial = tl.load(DSCALE + slot + c, mask=col_mask, other=0.0)
                    tl.store(DSCALE + slot + c, partial + dy * r, mask=col_mask)
                    if HAS_SHIFT:
                        partial = tl.load(DSHIFT + slot + c, mask=col_mask, other=0.0)
                        tl.store(DSHIFT + slot + c, partial + dy, mask=col_mask)
    else:
        col_mask = cols < n_cols
        w_eff = 0.0  # read only with HAS_WEIGHT
        if HAS_WEIGHT:
            w_eff = (tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32) + offset)[None, :]
        dw_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for mod in range(first_mod, last_mod):
            scale_row = SCALE + _as_int64(mod, first_mod) * n_cols
            one_plus_scale = 1.0 + tl.load(scale_row + cols, mask=col_mask, other=0.0).to(tl.float32)
            dscale_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
            dshift_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
            row_start = mod * rows_per_modulation + chunk * rows_per_chunk
            row_end = tl.minimum(row_start + rows_per_chunk, (mod + 1) * rows_per_modulation)
            for block_start in range(row_start, row_end, BLOCK_M):
                rows, row_mask, rows64 = row_tile(block_start, row_end, BLOCK_M)
                mask = row_mask[:, None] & col_mask[None, :]
                x = tl.load(X + rows64 * x_row_stride + cols[None, :], mask=mask, other=0.0)
                dy = tl.load(DY + rows64 * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)[:, None]
                g = dy * one_plus_scale[None, :]
                g_w = g
                if HAS_WEIGHT:
                    g_w = g * w_eff
                x_unrounded = x.to(tl.float32) * rstd
                mean_gx = tl.sum(g_w * x_unrounded, axis=1) / n_cols
                dx = rstd * (g_w - x_unrounded * mean_gx[:, None])
                tl.store(DX + rows64 * dx_row_stride + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
                r, x_hat = _normed(x, rstd, w_eff, HAS_WEIGHT, ROUND_X_HAT)
                if NEED_DW:
                    dw_acc += tl.sum(g * x_hat, axis=0)
                dscale_acc += tl.sum(dy * r, axis=0)
                dshift_acc += tl.sum(dy, axis=0)
            slot = (mod * n_chunks + chunk).to(tl.int64) * n_cols
            tl.store(DSCALE + slot + cols, dscale_acc.to(DSCALE.dtype.element_ty), mask=col_mask)
            if HAS_SHIFT:
                tl.store(DSHIFT + slot + cols, dshift_acc.to(DSHIFT.dtype.element_ty), mask=col_mask)
        if NEED_DW:
            tl.store(dw_row + cols, dw_acc, mask=col_mask)


@dataclasses.dataclass(frozen=True)
class BackwardUnits:
    """The backward's work units: ``n_chunks`` chunks of ``rows_per_chunk`` rows per modulation
    row, ``mod_rows_per_unit`` modulation rows per unit (one of the two is 1), ``programs`` units."""

    mod_rows_per_unit: int
    n_chunks: int
    rows_per_chunk: int
    programs: int


def plan_backward_units(m: int, per: int, block_m: int, device: torch.device) -> BackwardUnits:
    """About one unit per SM (rms_norm's persistent grid): several whole modulation rows per unit
    when there are more modulation rows than that, else each split into chunks of whole row tiles."""
    target = hardware.sm_count(device.index) * hardware.BACKWARD_PROGRAMS_PER_SM
    if m >= target:
        mod_rows_per_unit = triton.cdiv(m, target)
        return BackwardUnits(mod_rows_per_unit, 1, per, triton.cdiv(m, mod_rows_per_unit))
    chunks = max(1, min(triton.cdiv(target, m), triton.cdiv(per, block_m)))
    # At least one tile (no rows: one empty chunk).
    rows_per_chunk = max(1, triton.cdiv(triton.cdiv(per, chunks), block_m)) * block_m
    n_chunks = max(1, triton.cdiv(per, rows_per_chunk))
    return BackwardUnits(1, n_chunks, rows_per_chunk, m * n_chunks)


def plan_backward_tiles(n_cols: int, per: int) -> TilePlan:
    """The norms' row tiles at this backward's own sizes, with no more rows per tile than a
    modulation row has (a tile never spans two modulation rows)."""
    per_warp = hardware.MODULATED_RMS_NORM_BACKWARD_ELEMENTS_PER_WARP
    plan = plan_norm_rows(n_cols, hardware.MODULATED_RMS_NORM_BACKWARD_TILE_ELEMENTS, per_warp)
    block_m = min(plan.block_m, triton.next_power_of_2(max(per, 1)))
    if block_m == plan.block_m:
        return plan
    return dataclasses.replace(
        plan, block_m=block_m, num_warps=hardware.num_warps_for(block_m * plan.block_n, per_warp)
    )


def modulated_rms_norm_forward(
    x2d: torch.Tensor,
    weight: torch.Tensor | None,
    scale2d: torch.Tensor,
    shift2d: torch.Tensor | None,
    per: int,
    eps: float,
    offset: float,
    casting_mode: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the forward on rows of ``x2d`` (unit column stride); returns ``(y, rstd)``."""
    n_rows, n_cols = x2d.shape
    y = torch.empty_like(x2d)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    if x2d.numel() == 0:
        return y, rstd
    plan = plan_tiles(n_cols)
    plan.launch(
        _modulated_rms_norm_forward_kernel,
        plan.row_grid(n_rows),
        x2d,
        weight if weight is not None else x2d,  # never read without HAS_WEIGHT
        scale2d,
        shift2d if shift2d is not None else scale2d,  # never read without HAS_SHIFT
        y,
        rstd,
        x2d.stride(0),
        y.stride(0),
        n_rows,
        n_cols,
        per,
        eps,
        offset,
        HAS_WEIGHT=weight is not None,
        HAS_SHIFT=shift2d is not None,
        ROUND_X_HAT=_ROUND_X_HAT[casting_mode],
    )
    return y, rstd


def modulated_rms_norm_backward(
    dy2d: torch.Tensor,
    x2d: torch.Tensor,
    weight: torch.Tensor | None,
    scale2d: torch.Tensor,
    rstd: torch.Tensor,
    per: int,
    offset: float,
    casting_mode: str,
    dx: torch.Tensor,
    shift_dtype: torch.dtype | None,
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
    """Launch the backward: grad_x into ``dx`` (it may be ``dy2d``: in place); returns
    ``(grad_weight, grad_scale, grad_shift)``, grad_scale ``(M, hidden)`` in scale's dtype,
    grad_shift in ``shift_dtype`` (None: no shift)."""
    n_rows, n_cols = x2d.shape
    m = scale2d.shape[0]
    device = x2d.device
    plan = plan_backward_tiles(n_cols, per)
    units = plan_backward_units(m, per, plan.block_m, device)
    has_shift = shift_dtype is not None
    # Slots of the modulation gradients: final rows in their own dtype when one unit owns each
    # whole (and accumulates it in registers), fp32 partial rows to sum otherwise.
    direct = units.n_chunks == 1 and not plan.chunked
    alloc = torch.empty if direct else torch.zeros
    slots = m * units.n_chunks
    dscale = alloc((slots, n_cols), dtype=scale2d.dtype if direct else torch.float32, device=device)
    shift_slot_dtype = shift_dtype if direct else torch.float32
    dshift = alloc((slots, n_cols), dtype=shift_slot_dtype, device=device) if has_shift else None
    need_dw = weight is not None
    dw_alloc = torch.zeros if plan.chunked else torch.empty
    dw_partial = dw_alloc((units.programs, n_cols), dtype=torch.float32, device=device) if need_dw else None
    if n_rows:
        plan.launch(
            _modulated_rms_norm_backward_kernel,
            (units.programs,),
            dy2d,
            x2d,
            weight if weight is not None else x2d,  # never read without HAS_WEIGHT
            scale2d,
            rstd,
            dx,
            dw_partial if need_dw else rstd,  # never written without NEED_DW
            dscale,
            dshift if has_shift else dscale,  # never written without HAS_SHIFT
            dy2d.stride(0),
            x2d.stride(0),
            dx.stride(0),
            m,
            n_cols,
            offset,
            per,
            units.rows_per_chunk,
            units.n_chunks,
            units.mod_rows_per_unit,
            HAS_WEIGHT=weight is not None,
            NEED_DW=need_dw,
            HAS_SHIFT=has_shift,
            ROUND_X_HAT=_ROUND_X_HAT[casting_mode],
        )
    elif direct:  # no rows: the sums are empty
        dscale.zero_()
        if has_shift:
            dshift.zero_()
    if not direct:
        # Deterministic: a fixed-order sum over each modulation row's chunks.
        dscale = dscale.view(m, units.n_chunks, n_cols).sum(1).to(scale2d.dtype)
        if has_shift:
            dshift = dshift.view(m, units.n_chunks, n_cols).sum(1).to(shift_dtype)
    dw = None
    if need_dw:
        dw = torch.empty_like(weight)
        sum_partials(dw_partial, units.programs if n_rows else 0, dw, None, n_cols)
    return dw, dscale, dshift


class ModulatedRMSNormKernels:
    """`liger_core.drivers.modulated_rms_norm.ModulatedRMSNormKernels` on this module's kernels:
    one fused pass each way, nothing saved beyond the driver's tensors, no state (the backward
    plans its own tiles)."""

    protocol = modulated_rms_norm_driver.PROTOCOL

    @staticmethod
    def forward(x2d, weight, scale2d, shift2d, per, eps, offset, casting_mode):
        y, rstd = modulated_rms_norm_forward(x2d, weight, scale2d, shift2d, per, eps, offset, casting_mode)
        return y, rstd, (), None

    @staticmethod
    def backward(dy2d, x2d, weight, scale2d, rstd, saved, per, offset, casting_mode, dx, shift_dtype, state):
        return modulated_rms_norm_backward(dy2d, x2d, weight, scale2d, rstd, per, offset, casting_mode, dx, shift_dtype)


LigerModulatedRMSNormFunction = implements("modulated_rms_norm")(
    modulated_rms_norm_driver.autograd_function(ModulatedRMSNormKernels(), __name__)
)
