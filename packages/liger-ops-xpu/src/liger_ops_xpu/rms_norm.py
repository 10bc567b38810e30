"""RMSNorm for Intel GPUs: Triton kernels, launch plan and autograd Function.

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

import functools
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from liger_core.ops.rms_norm import check_args

from liger_ops_xpu import hardware

# casting_mode -> whether x_hat is rounded to x.dtype before the weight multiply
# ("llama" and "none" round; "gemma" stays in fp32 throughout).
_ROUND_X_HAT = {"llama": True, "none": True, "gemma": False}


@triton.jit
def _scaled_x_hat(x, rstd, W, cols, col_mask, offset, HAS_WEIGHT: tl.constexpr, ROUND_X_HAT: tl.constexpr):
    """Forward output of a [BLOCK_M, BLOCK_N] tile in fp32: x * rstd, rounded like the model, times (w + offset)."""
    x_hat = x.to(tl.float32) * rstd[:, None]
    if ROUND_X_HAT:
        x_hat = x_hat.to(x.dtype).to(tl.float32)
    if HAS_WEIGHT:
        w = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)
        x_hat = x_hat * (w + offset)[None, :]
    return x_hat


@triton.jit
def _rms_norm_forward_kernel(
    X,
    W,
    Y,
    RSTD,
    x_row_stride,
    y_row_stride,
    n_rows,
    n_cols,
    eps,
    offset,
    HAS_WEIGHT: tl.constexpr,
    ROUND_X_HAT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    N_CHUNKS: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    rows64 = rows.to(tl.int64)
    x_rows = X + rows64[:, None] * x_row_stride
    y_rows = Y + rows64[:, None] * y_row_stride
    cols = tl.arange(0, BLOCK_N)

    if N_CHUNKS == 1:
        # The whole row is in the tile: one read of x.
        col_mask = cols < n_cols
        mask = row_mask[:, None] & col_mask[None, :]
        x = tl.load(x_rows + cols[None, :], mask=mask, other=0.0)
        xf = x.to(tl.float32)
        rstd = tl.math.rsqrt(tl.sum(xf * xf, axis=1) / n_cols + eps)
        y = _scaled_x_hat(x, rstd, W, cols, col_mask, offset, HAS_WEIGHT, ROUND_X_HAT)
        tl.store(y_rows + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    else:
        # Wide rows: a pass for the mean square, a pass that writes the output.
        sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for chunk in range(N_CHUNKS):
            c = chunk * BLOCK_N + cols
            mask = row_mask[:, None] & (c < n_cols)[None, :]
            xf = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
            sum_sq += tl.sum(xf * xf, axis=1)
        rstd = tl.math.rsqrt(sum_sq / n_cols + eps)
        for chunk in range(N_CHUNKS):
            c = chunk * BLOCK_N + cols
            col_mask = c < n_cols
            mask = row_mask[:, None] & col_mask[None, :]
            x = tl.load(x_rows + c[None, :], mask=mask, other=0.0)
            y = _scaled_x_hat(x, rstd, W, c, col_mask, offset, HAS_WEIGHT, ROUND_X_HAT)
            tl.store(y_rows + c[None, :], y.to(Y.dtype.element_ty), mask=mask)
    tl.store(RSTD + rows, rstd, mask=row_mask)


@triton.jit
def _rms_norm_backward_kernel(
    DY,
    X,
    W,
    RSTD,
    DX,
    DW_PARTIAL,
    dy_row_stride,
    x_row_stride,
    dx_row_stride,
    n_rows,
    n_cols,
    offset,
    tiles_per_program,
    HAS_WEIGHT: tl.constexpr,
    ROUND_X_HAT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    N_CHUNKS: tl.constexpr,
    STATIC_TILES: tl.constexpr,
):
    # grad_x = rstd * (g - x_hat * mean(g * x_hat)), g = dy * (w + offset);
    # grad_w = sum over rows of dy * x_hat (x_hat rounded to x.dtype where the forward rounded it).
    pid = tl.program_id(0)
    # This program owns tiles_per_program consecutive tiles from first_row on. The loop bound is
    # chosen inline (not assigned) because the interpreter would turn an assigned int into an array.
    first_row = pid * tiles_per_program * BLOCK_M
    cols = tl.arange(0, BLOCK_N)
    dw_row = DW_PARTIAL + pid.to(tl.int64) * n_cols

    if N_CHUNKS == 1:
        col_mask = cols < n_cols
        if HAS_WEIGHT:
            w_eff = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32) + offset
        dw_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for t in range(STATIC_TILES if STATIC_TILES > 0 else tiles_per_program):
            rows = first_row + t * BLOCK_M + tl.arange(0, BLOCK_M)
            row_mask = rows < n_rows
            rows64 = rows.to(tl.int64)
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
            tl.store(DX + rows64[:, None] * dx_row_stride + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
            if HAS_WEIGHT:
                if ROUND_X_HAT:
                    x_hat = x_hat.to(x.dtype).to(tl.float32)
                dw_acc += tl.sum(dy * x_hat, axis=0)
        if HAS_WEIGHT:
            tl.store(dw_row + cols, dw_acc, mask=col_mask)
    else:
        # Wide rows: pass 1 gives each row's sum(g * x); pass 2 writes grad_x chunk by chunk and
        # adds the chunk's grad_weight to this program's partial row (only this program touches it).
        for t in range(STATIC_TILES if STATIC_TILES > 0 else tiles_per_program):
            rows = first_row + t * BLOCK_M + tl.arange(0, BLOCK_M)
            row_mask = rows < n_rows
            rows64 = rows.to(tl.int64)
            x_rows = X + rows64[:, None] * x_row_stride
            dy_rows = DY + rows64[:, None] * dy_row_stride
            rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
            dot = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for chunk in range(N_CHUNKS):
                c = chunk * BLOCK_N + cols
                col_mask = c < n_cols
                mask = row_mask[:, None] & col_mask[None, :]
                xf = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
                g = tl.load(dy_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
                if HAS_WEIGHT:
                    g = g * (tl.load(W + c, mask=col_mask, other=0.0).to(tl.float32) + offset)[None, :]
                dot += g * xf
            mean_gx = tl.sum(dot, axis=1) * rstd / n_cols
            for chunk in range(N_CHUNKS):
                c = chunk * BLOCK_N + cols
                col_mask = c < n_cols
                mask = row_mask[:, None] & col_mask[None, :]
                x = tl.load(x_rows + c[None, :], mask=mask, other=0.0)
                dy = tl.load(dy_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
                x_hat = x.to(tl.float32) * rstd[:, None]
                g = dy
                if HAS_WEIGHT:
                    g = dy * (tl.load(W + c, mask=col_mask, other=0.0).to(tl.float32) + offset)[None, :]
                dx = rstd[:, None] * (g - x_hat * mean_gx[:, None])
                tl.store(DX + rows64[:, None] * dx_row_stride + c[None, :], dx.to(DX.dtype.element_ty), mask=mask)
                if HAS_WEIGHT:
                    if ROUND_X_HAT:
                        x_hat = x_hat.to(x.dtype).to(tl.float32)
                    partial = tl.load(dw_row + c, mask=col_mask, other=0.0)
                    tl.store(dw_row + c, partial + tl.sum(dy * x_hat, axis=0), mask=col_mask)


@dataclass(frozen=True)
class TilePlan:
    """How rows of one width are cut into tiles: BLOCK_M rows x BLOCK_N columns, N_CHUNKS
    column chunks per row (1: the whole row is in the tile), ``num_warps`` sub-groups."""

    block_m: int
    block_n: int
    n_chunks: int
    num_warps: int

    @property
    def chunked(self) -> bool:
        return self.n_chunks > 1


def plan_tiles(n_cols: int, device: torch.device | str | None = None) -> TilePlan:
    """Tile shape for rows of ``n_cols``: whole rows (several when short) or chunks when wide.

    Rows up to ``hardware.MAX_FUSED_BLOCK`` (rounded up to a power of two) stay in one tile,
    packed until a tile holds about ``TARGET_TILE_ELEMENTS``; wider rows go in
    ``CHUNK_BLOCK``-wide chunks. Caps are read at call time so tests can lower them.
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    sub_group = hardware.sub_group_size(device.index) if device.type == "xpu" else hardware.DEFAULT_SUB_GROUP_SIZE
    return _plan(
        n_cols,
        sub_group,
        hardware.MAX_FUSED_BLOCK,
        hardware.CHUNK_BLOCK,
        hardware.TARGET_TILE_ELEMENTS,
        hardware.MAX_ROWS_PER_TILE,
    )


@functools.lru_cache(maxsize=256)  # called on every op call; the caps are part of the key
def _plan(
    n_cols: int, sub_group: int, max_fused_block: int, chunk_block: int, tile_elements: int, max_rows: int
) -> TilePlan:
    block_n = triton.next_power_of_2(max(n_cols, 1))
    n_chunks = 1
    if block_n > max_fused_block:
        block_n = min(chunk_block, max_fused_block)
        n_chunks = triton.cdiv(n_cols, block_n)
    block_m = max(1, min(tile_elements // block_n, max_rows))
    return TilePlan(block_m, block_n, n_chunks, hardware.num_warps_for(block_m * block_n, sub_group))


def _eu_device_index(device: torch.device) -> int | None:
    return device.index if device.type == "xpu" else None


def rms_norm_forward(
    x2d: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    offset: float,
    casting_mode: str,
    plan: TilePlan,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the forward kernel on rows of ``x2d`` (unit column stride); returns ``(y, rstd)``."""
    n_rows, n_cols = x2d.shape
    y = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    if x2d.numel() == 0:
        return y, rstd
    kernel = _rms_norm_forward_kernel
    kernel[(triton.cdiv(n_rows, plan.block_m),)](
        x2d,
        weight if weight is not None else x2d,  # never read without HAS_WEIGHT
        y,
        rstd,
        x2d.stride(0),
        y.stride(0),
        n_rows,
        n_cols,
        eps,
        offset,
        HAS_WEIGHT=weight is not None,
        ROUND_X_HAT=_ROUND_X_HAT[casting_mode],
        BLOCK_M=plan.block_m,
        BLOCK_N=plan.block_n,
        N_CHUNKS=plan.n_chunks,
        **hardware.launch_kwargs(kernel, x2d.device, plan.num_warps),
    )
    return y, rstd


def backward_grid(n_rows: int, plan: TilePlan, device: torch.device) -> tuple[int, int]:
    """``(programs, tiles_per_program)`` for the backward pass: at most as many programs as the
    device keeps resident, at most one per tile, every program with at least one tile."""
    n_tiles = triton.cdiv(n_rows, plan.block_m)
    programs = max(1, min(hardware.persistent_programs(plan.num_warps, _eu_device_index(device)), n_tiles))
    tiles_per_program = triton.cdiv(n_tiles, programs)
    return triton.cdiv(n_tiles, tiles_per_program), tiles_per_program


def rms_norm_backward(
    dy2d: torch.Tensor,
    x2d: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    offset: float,
    casting_mode: str,
    in_place: bool,
    plan: TilePlan,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Launch the backward kernel; returns ``(grad_x, grad_weight)`` (grad_x in ``dy2d`` when in_place)."""
    n_rows, n_cols = x2d.shape
    has_weight = weight is not None
    # Writing grad_x over dy is only safe where every element of dy has its own memory.
    reuse_dy = in_place and dy2d.is_contiguous() and dy2d.dtype == x2d.dtype
    dx = dy2d if reuse_dy else torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device)
    if x2d.numel() == 0:
        return dx, (torch.zeros_like(weight) if has_weight else None)
    programs, tiles_per_program = backward_grid(n_rows, plan, x2d.device)
    dw_partial = None
    if has_weight:
        # One fp32 row per program; chunked plans accumulate into it, so it starts at zero.
        alloc = torch.zeros if plan.chunked else torch.empty
        dw_partial = alloc((programs, n_cols), dtype=torch.float32, device=x2d.device)
    kernel = _rms_norm_backward_kernel
    kernel[(programs,)](
        dy2d,
        x2d,
        weight if has_weight else x2d,
        rstd,
        dx,
        dw_partial if has_weight else rstd,  # never written without HAS_WEIGHT
        dy2d.stride(0),
        x2d.stride(0),
        dx.stride(0),
        n_rows,
        n_cols,
        offset,
        tiles_per_program,
        HAS_WEIGHT=has_weight,
        ROUND_X_HAT=_ROUND_X_HAT[casting_mode],
        BLOCK_M=plan.block_m,
        BLOCK_N=plan.block_n,
        N_CHUNKS=plan.n_chunks,
        STATIC_TILES=tiles_per_program if hardware.interpreting(kernel) else 0,
        **hardware.launch_kwargs(kernel, x2d.device, plan.num_warps),
    )
    dw = dw_partial.sum(0).to(weight.dtype) if has_weight else None
    return dx, dw


def _rows(t: torch.Tensor, n_cols: int) -> torch.Tensor:
    """``t`` as ``(-1, n_cols)`` rows with unit column stride (a copy only where needed)."""
    t2d = t.reshape(math.prod(t.shape[:-1]), n_cols)  # not -1: ambiguous when n_cols == 0
    return t2d if t2d.stride(-1) == 1 or n_cols <= 1 else t2d.contiguous()


class LigerRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps, offset, casting_mode, in_place):
        n_cols = x.shape[-1]
        x2d = _rows(x, n_cols)
        plan = plan_tiles(n_cols, x.device)
        y, rstd = rms_norm_forward(x2d, weight, eps, offset, casting_mode, plan)
        ctx.save_for_backward(x2d, weight, rstd)
        ctx.offset, ctx.casting_mode, ctx.in_place, ctx.plan = offset, casting_mode, in_place, plan
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x2d, weight, rstd = ctx.saved_tensors
        dy2d = _rows(dy, x2d.shape[1])
        dx, dw = rms_norm_backward(dy2d, x2d, weight, rstd, ctx.offset, ctx.casting_mode, ctx.in_place, ctx.plan)
        return dx.view(dy.shape), dw, None, None, None, None


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> torch.Tensor:
    """The interface's ``rms_norm`` (see ``liger_core.ops.rms_norm.rms_norm``) on Intel GPUs."""
    check_args(x, weight, eps, offset, casting_mode)
    return LigerRMSNormFunction.apply(x, weight, float(eps), float(offset), casting_mode, in_place)
