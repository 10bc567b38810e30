"""Modulated RMSNorm (``(1 + scale) * RMSNorm(x) + shift``, DiT's AdaLN norm) for Ascend NPUs:
Triton kernels, tile plans, launch and the kernel adapter of `liger_core.drivers.modulated_rms_norm`.

The normalisation is rms_norm's own kernels (`rms_norm.rms_norm_forward` / `rms_norm_backward`,
their UB-sized plans); the modulation is one more pass. Forward: the work is (row, BLOCK_N
columns) units, one program per vector core walking the units ``pid, pid + programs, ...``; each
unit modulates one piece of a normalised row with its scale and shift row (row i uses
modulation row ``i // rows_per_modulation``). Backward: (modulation row, chunk of its rows,
BLOCK_N columns) units; each writes the normalisation's incoming gradient ``dy * (1 + scale)``
(fp32) and sums ``dy * rms_norm(x)`` and ``dy`` over its rows in fp32; the per-chunk partial
rows are summed once on the host (no atomics, deterministic). The normalised rows are saved for
that sum (one activation in x's dtype).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import modulated_rms_norm as modulated_rms_norm_driver

from liger_ops_ascend import hardware
from liger_ops_ascend._jit import flat_indices
from liger_ops_ascend._tiling import as_rows, dma, elem_bytes, mask, once, work
from liger_ops_ascend.launch import KernelPlan, launch
from liger_ops_ascend.rms_norm import rms_norm_backward, rms_norm_forward

FP32 = 4


@triton.jit
def _modulated_rms_norm_forward_kernel(
    R, SCALE, SHIFT, Y, n_units, n_col_blocks, n_cols, rows_per_modulation, HAS_SHIFT: tl.constexpr,
    BLOCK_N: tl.constexpr,
):  # fmt: skip
    pid, num_programs, idx = flat_indices(BLOCK_N)
    for unit_i in range(pid, n_units, num_programs):
        unit = (pid * 0 + unit_i).to(tl.int64)
        row = unit // n_col_blocks
        mod_row = row // rows_per_modulation
        cols = (unit % n_col_blocks) * BLOCK_N + idx
        col_mask = cols < n_cols
        r = tl.load(R + row * n_cols + cols, mask=col_mask, care_padding=False).to(tl.float32)
        scale = tl.load(SCALE + mod_row * n_cols + cols, mask=col_mask, care_padding=False).to(tl.float32)
        y = r * (1.0 + scale)
        if HAS_SHIFT:
            y += tl.load(SHIFT + mod_row * n_cols + cols, mask=col_mask, care_padding=False).to(tl.float32)
        tl.store(Y + row * n_cols + cols, y.to(Y.dtype.element_ty), mask=col_mask)


@triton.jit
def _modulated_rms_norm_backward_kernel(
    DY, R, SCALE, G, DSCALE_PARTIAL, DSHIFT_PARTIAL, n_units, n_col_blocks, n_cols, dy_row_stride,
    rows_per_modulation, rows_per_chunk, n_chunks, HAS_SHIFT: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    pid, num_programs, idx = flat_indices(BLOCK_N)
    for unit_i in range(pid, n_units, num_programs):
        unit = (pid * 0 + unit_i).to(tl.int64)
        chunk_unit = unit // n_col_blocks  # mod_row * n_chunks + chunk
        mod_row = chunk_unit // n_chunks
        cols = (unit % n_col_blocks) * BLOCK_N + idx
        col_mask = cols < n_cols
        row = mod_row * rows_per_modulation + (chunk_unit % n_chunks) * rows_per_chunk
        end = tl.minimum(row + rows_per_chunk, (mod_row + 1) * rows_per_modulation)
        scale = tl.load(SCALE + mod_row * n_cols + cols, mask=col_mask, care_padding=False).to(tl.float32)
        one_plus_scale = 1.0 + scale
        dscale = tl.zeros((BLOCK_N,), dtype=tl.float32)
        dshift = tl.zeros((BLOCK_N,), dtype=tl.float32)
        while row < end:
            dy = tl.load(DY + row * dy_row_stride + cols, mask=col_mask, care_padding=False).to(tl.float32)
            r = tl.load(R + row * n_cols + cols, mask=col_mask, care_padding=False).to(tl.float32)
            tl.store(G + row * n_cols + cols, dy * one_plus_scale, mask=col_mask)
            dscale += dy * r
            dshift += dy
            row += 1
        tl.store(DSCALE_PARTIAL + chunk_unit * n_cols + cols, dscale, mask=col_mask)
        if HAS_SHIFT:
            tl.store(DSHIFT_PARTIAL + chunk_unit * n_cols + cols, dshift, mask=col_mask)


@dataclass(frozen=True)
class ModulationPlan:
    block_n: int
    n_col_blocks: int
    kernel: KernelPlan


@functools.lru_cache(maxsize=256)
def _plan(direction: str, n_units_rows: int, n_cols: int, xb: int, mb: int, hw: hardware.Hardware) -> ModulationPlan:
    block_n = max(hardware.min_block(min(xb, mb)), min(hardware.MODULATION_BLOCK_N, triton.next_power_of_2(n_cols)))
    n_col_blocks = triton.cdiv(n_cols, block_n)
    if direction == "forward":
        tiles = (
            *dma("r", 1, block_n, xb), *dma("scale", 1, block_n, mb), *dma("shift", 1, block_n, mb),
            *dma("y", 1, block_n, xb), *work("f32_", 1, block_n, 3), *mask(1, block_n),
        )  # fmt: skip
    else:
        tiles = (
            *dma("dy", 1, block_n, xb), *dma("r", 1, block_n, xb), *once("scale", 1, block_n, mb),
            *dma("g", 1, block_n, FP32), *once("dscale", 1, block_n, FP32), *once("dshift", 1, block_n, FP32),
            *work("f32_", 1, block_n, 3), *mask(1, block_n),
        )  # fmt: skip
    programs = max(1, min(hw.vector_cores, n_units_rows * n_col_blocks))
    return ModulationPlan(block_n, n_col_blocks, KernelPlan(f"modulated_rms_norm_{direction}", (programs,), tiles))


def plan_modulation(direction: str, n_rows: int, n_cols: int, x_dtype, mod_dtype, hw: hardware.Hardware):
    """The tile plan of ``n_rows`` units of rows (normalised rows forward, chunks of a
    modulation row's rows backward) of ``n_cols`` columns."""
    return _plan(direction, n_rows, n_cols, elem_bytes(x_dtype), elem_bytes(mod_dtype), hw)


def modulate_forward(
    r: torch.Tensor, scale2d: torch.Tensor, shift2d: torch.Tensor | None, per: int, hw: hardware.Hardware
) -> torch.Tensor:
    """``(1 + scale) * r + shift`` over contiguous normalised rows ``r``."""
    n_rows, n_cols = r.shape
    y = torch.empty_like(r)
    if r.numel() == 0:
        return y
    p = plan_modulation("forward", n_rows, n_cols, r.dtype, scale2d.dtype, hw)
    launch(
        _modulated_rms_norm_forward_kernel, p.kernel, hw,
        r, scale2d, shift2d if shift2d is not None else scale2d, y, n_rows * p.n_col_blocks, p.n_col_blocks, n_cols,
        per, HAS_SHIFT=shift2d is not None, BLOCK_N=p.block_n,
    )  # fmt: skip
    return y


def modulate_backward(
    dy2d: torch.Tensor, r: torch.Tensor, scale2d: torch.Tensor, has_shift: bool, per: int, hw: hardware.Hardware
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
    p = plan_modulation("backward", m * n_chunks, n_cols, r.dtype, scale2d.dtype, hw)
    launch(
        _modulated_rms_norm_backward_kernel, p.kernel, hw,
        dy2d, r, scale2d, g, dscale, dshift if has_shift else dscale, m * n_chunks * p.n_col_blocks, p.n_col_blocks,
        n_cols, dy2d.stride(0), per, rows_per_chunk, n_chunks, HAS_SHIFT=has_shift, BLOCK_N=p.block_n,
    )  # fmt: skip
    dscale = dscale.view(m, n_chunks, n_cols).sum(1)
    return g, dscale, (dshift.view(m, n_chunks, n_cols).sum(1) if has_shift else None)


class ModulatedRMSNormKernels:
    """`liger_core.drivers.modulated_rms_norm.ModulatedRMSNormKernels` on this module's kernels:
    rms_norm's kernels, then the modulation pass. The normalised rows are the one tensor the
    backward needs beyond the driver's (``saved``); the device's facts are the ``state``. The
    backward writes grad_x only after the modulation pass has read the incoming gradient (into
    its own fp32 buffer), so grad_x may take the incoming gradient's memory."""

    protocol = modulated_rms_norm_driver.PROTOCOL

    @staticmethod
    def forward(x2d, weight, scale2d, shift2d, per, eps, offset, casting_mode):
        hw = hardware.current(x2d.device)
        r, rstd, _ = rms_norm_forward(as_rows(x2d), weight, eps, offset, casting_mode, hw)
        return modulate_forward(r, scale2d, shift2d, per, hw), rstd, (r,), hw

    @staticmethod
    def backward(dy2d, x2d, weight, scale2d, rstd, saved, per, offset, casting_mode, dx, shift_dtype, state):
        (r,) = saved
        has_shift = shift_dtype is not None
        g, dscale, dshift = modulate_backward(as_rows(dy2d), r, scale2d, has_shift, per, state)
        dw = rms_norm_backward(g, x2d, weight, rstd, offset, casting_mode, dx, state)
        return dw, dscale.to(scale2d.dtype), (dshift.to(shift_dtype) if has_shift else None)


LigerModulatedRMSNormFunction = implements("modulated_rms_norm")(
    modulated_rms_norm_driver.autograd_function(ModulatedRMSNormKernels(), __name__)
)
