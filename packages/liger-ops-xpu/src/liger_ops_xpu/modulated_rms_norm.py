"""Modulated RMSNorm (``(1 + scale) * RMSNorm(x) + shift``, DiT's AdaLN norm) for Intel GPUs:
Triton kernels, launch and autograd Function.

The normalisation is rms_norm's own kernels (`rms_norm.rms_norm_forward` / `rms_norm_backward`,
their tile plans); the modulation is one more pass. Forward: each program modulates BLOCK_M
normalised rows x BLOCK_N columns, reading each row's scale and shift row (row i uses modulation
row ``i // rows_per_modulation``). Backward: one program per (modulation row, chunk of its rows,
BLOCK_N columns) writes the normalisation's incoming gradient ``dy * (1 + scale)`` (fp32) and sums
``dy * rms_norm(x)`` and ``dy`` over its rows in fp32 registers; the per-chunk partial rows are
summed once on the host (no atomics, deterministic). The normalised rows are saved for that sum
(one activation in x's dtype).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.ops.modulated_rms_norm import check_args, modulation_rows

from liger_ops_xpu import hardware
from liger_ops_xpu._tiling import as_rows, elementwise_num_warps, plan_tiles
from liger_ops_xpu.rms_norm import rms_norm_backward, rms_norm_forward


@triton.jit
def _modulated_rms_norm_forward_kernel(
    R, SCALE, SHIFT, Y, n_rows, n_cols, rows_per_modulation, HAS_SHIFT: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < n_rows
    mask = row_mask[:, None] & (cols < n_cols)[None, :]
    mod_rows = rows // rows_per_modulation
    r = tl.load(R + rows[:, None] * n_cols + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    scale = tl.load(SCALE + mod_rows[:, None] * n_cols + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    y = r * (1.0 + scale)
    if HAS_SHIFT:
        y += tl.load(SHIFT + mod_rows[:, None] * n_cols + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + rows[:, None] * n_cols + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _modulated_rms_norm_backward_kernel(
    DY, R, SCALE, G, DSCALE_PARTIAL, DSHIFT_PARTIAL, n_cols, dy_row_stride, rows_per_modulation, rows_per_chunk,
    n_chunks, HAS_SHIFT: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    # Program (mod_row * n_chunks + chunk, column block): rows [first, end) of modulation row mod_row.
    unit = tl.program_id(0).to(tl.int64)
    mod_row = unit // n_chunks
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    row = mod_row * rows_per_modulation + (unit % n_chunks) * rows_per_chunk
    end = tl.minimum(row + rows_per_chunk, (mod_row + 1) * rows_per_modulation)
    one_plus_scale = 1.0 + tl.load(SCALE + mod_row * n_cols + cols, mask=col_mask, other=0.0).to(tl.float32)
    dscale = tl.zeros((BLOCK_N,), dtype=tl.float32)
    dshift = tl.zeros((BLOCK_N,), dtype=tl.float32)
    # A while loop: the bounds are program-dependent values (a range over them is not a constexpr
    # trip count, which the interpreters reject under NumPy 2.4).
    while row < end:
        dy = tl.load(DY + row * dy_row_stride + cols, mask=col_mask, other=0.0).to(tl.float32)
        r = tl.load(R + row * n_cols + cols, mask=col_mask, other=0.0).to(tl.float32)
        tl.store(G + row * n_cols + cols, dy * one_plus_scale, mask=col_mask)
        dscale += dy * r
        dshift += dy
        row += 1
    tl.store(DSCALE_PARTIAL + unit * n_cols + cols, dscale, mask=col_mask)
    if HAS_SHIFT:
        tl.store(DSHIFT_PARTIAL + unit * n_cols + cols, dshift, mask=col_mask)


def modulate_forward(r: torch.Tensor, scale2d: torch.Tensor, shift2d: torch.Tensor | None, per: int) -> torch.Tensor:
    """``(1 + scale) * r + shift`` over contiguous normalised rows ``r``."""
    n_rows, n_cols = r.shape
    y = torch.empty_like(r)
    if r.numel() == 0:
        return y
    block_m = hardware.MODULATION_BLOCK_M
    block_n = min(hardware.MODULATION_BLOCK_N, triton.next_power_of_2(n_cols))
    grid = (triton.cdiv(n_rows, block_m), triton.cdiv(n_cols, block_n))
    _modulated_rms_norm_forward_kernel[grid](
        r, scale2d, shift2d if shift2d is not None else scale2d, y, n_rows, n_cols, per,
        HAS_SHIFT=shift2d is not None, BLOCK_M=block_m, BLOCK_N=block_n,
        **hardware.launch_kwargs(
            _modulated_rms_norm_forward_kernel, r.device, elementwise_num_warps(block_m * block_n), register_heavy=False
        ),
    )  # fmt: skip
    return y


def modulate_backward(
    dy2d: torch.Tensor, r: torch.Tensor, scale2d: torch.Tensor, has_shift: bool, per: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(g, grad_scale, grad_shift)``: the normalisation's incoming gradient (fp32) and the
    modulation's gradients in fp32, ``(M, hidden)``."""
    n_rows, n_cols = r.shape
    m = scale2d.shape[0]
    g = torch.empty((n_rows, n_cols), dtype=torch.float32, device=r.device)
    if n_rows == 0:
        zeros = torch.zeros((m, n_cols), dtype=torch.float32, device=r.device)
        return g, zeros, (zeros.clone() if has_shift else None)
    if dy2d.stride(1) != 1:
        dy2d = dy2d.contiguous()
    rows_per_chunk = min(per, hardware.MODULATION_ROWS_PER_CHUNK)
    n_chunks = triton.cdiv(per, rows_per_chunk)
    dscale = torch.empty((m * n_chunks, n_cols), dtype=torch.float32, device=r.device)
    dshift = torch.empty_like(dscale) if has_shift else None
    block_n = min(hardware.MODULATION_BLOCK_N, triton.next_power_of_2(n_cols))
    grid = (m * n_chunks, triton.cdiv(n_cols, block_n))
    _modulated_rms_norm_backward_kernel[grid](
        dy2d, r, scale2d, g, dscale, dshift if has_shift else dscale, n_cols, dy2d.stride(0), per, rows_per_chunk,
        n_chunks, HAS_SHIFT=has_shift, BLOCK_N=block_n,
        **hardware.launch_kwargs(
            _modulated_rms_norm_backward_kernel, r.device, elementwise_num_warps(block_n), register_heavy=False
        ),
    )  # fmt: skip
    dscale = dscale.view(m, n_chunks, n_cols).sum(1)
    return g, dscale, (dshift.view(m, n_chunks, n_cols).sum(1) if has_shift else None)


@implements("modulated_rms_norm")
class LigerModulatedRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, scale, shift, eps, offset, casting_mode, in_place):
        check_args(x, weight, scale, shift, eps, offset, casting_mode, in_place)
        x2d = as_rows(x)
        m, per = modulation_rows(x, scale)
        scale2d = scale.reshape(m, x.shape[-1]).contiguous()
        shift2d = shift.reshape(m, x.shape[-1]).contiguous() if shift is not None else None
        plan = plan_tiles(x2d.shape[1], x.device)
        r, rstd, _ = rms_norm_forward(x2d, weight, float(eps), float(offset), casting_mode, plan)
        y = modulate_forward(r, scale2d, shift2d, per)
        ctx.save_for_backward(x2d, weight, rstd, r, scale2d)
        ctx.offset, ctx.casting_mode, ctx.per, ctx.has_shift = float(offset), casting_mode, per, shift is not None
        ctx.plan = plan
        ctx.mod = (scale.shape, scale.dtype, None if shift is None else (shift.shape, shift.dtype))
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x2d, weight, rstd, r, scale2d = ctx.saved_tensors
        g, dscale, dshift = modulate_backward(as_rows(dy), r, scale2d, ctx.has_shift, ctx.per)
        # g is the op's own fp32 buffer: rms_norm's backward may write grad_x elsewhere only (its
        # in_place would put x's dtype in fp32 memory).
        dx, dw = rms_norm_backward(g, x2d, weight, rstd, ctx.offset, ctx.casting_mode, False, ctx.plan)
        scale_shape, scale_dtype, shift_meta = ctx.mod
        dscale = dscale.to(scale_dtype).view(scale_shape)
        dshift = dshift.to(shift_meta[1]).view(shift_meta[0]) if shift_meta is not None else None
        return dx.view(dy.shape), dw, dscale, dshift, None, None, None, None
