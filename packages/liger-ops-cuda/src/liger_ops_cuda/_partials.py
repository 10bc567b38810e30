"""Shared pieces of the norm family's backward passes: per-program fp32 partial rows of
parameter gradients, summed once at the end (deterministic, no atomics), and the row plan."""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

from liger_ops_cuda import hardware

# The Triton interpreter runs programs one after another, each at a fixed cost: there the
# partial sums use few wide programs instead of the GPU's many narrow ones.
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
_INTERPRETER_REDUCE_BLOCK = 4096


@triton.jit
def _sum_partials_kernel(
    PARTIAL,
    OUT0,
    OUT1,
    n_partials,
    width,
    split,
    HAS_OUT0: tl.constexpr,
    HAS_OUT1: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # Column c of the (n_partials, width) fp32 rows sums into OUT0[c] (c < split) or
    # OUT1[c - split], cast to each output's dtype: several parameter gradients, one launch.
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < width
    parts = tl.arange(0, BLOCK_P)
    acc = tl.zeros((BLOCK_P, BLOCK), dtype=tl.float32)
    for p in range(0, n_partials, BLOCK_P):
        rows = p + parts
        m = (rows < n_partials)[:, None] & mask[None, :]
        acc += tl.load(PARTIAL + rows.to(tl.int64)[:, None] * width + cols[None, :], mask=m, other=0.0)
    total = tl.sum(acc, axis=0)
    if HAS_OUT0:
        tl.store(OUT0 + cols, total.to(OUT0.dtype.element_ty), mask=cols < split)
    if HAS_OUT1:
        tl.store(OUT1 + (cols - split), total.to(OUT1.dtype.element_ty), mask=mask & (cols >= split))


def sum_partials(
    partial: torch.Tensor | None, n_partials: int, out0: torch.Tensor | None, out1: torch.Tensor | None, split: int
) -> None:
    """Sum the first ``n_partials`` rows of ``partial`` (fp32, row width ``split`` + len(out1))
    into ``out0`` (columns ``[0, split)``) and ``out1`` (the rest); either may be None."""
    if out0 is None and out1 is None:
        return
    width = partial.shape[1] if partial is not None else 0
    if width == 0:
        return
    block = _INTERPRETER_REDUCE_BLOCK if _INTERPRETED else hardware.REDUCE_BLOCK
    _sum_partials_kernel[(triton.cdiv(width, block),)](
        partial,
        out0 if out0 is not None else partial,
        out1 if out1 is not None else partial,
        n_partials,
        width,
        split,
        HAS_OUT0=out0 is not None,
        HAS_OUT1=out1 is not None,
        BLOCK_P=hardware.REDUCE_ROWS,
        BLOCK=block,
    )


def as_rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as ``(rows, hidden)`` with unit column stride (a copy only when needed)."""
    x2d = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])  # explicit rows: hidden may be 0
    return x2d if x2d.stride(-1) == 1 else x2d.contiguous()


def grad_rows(dy: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """An incoming gradient as dense-column rows (a broadcast gradient is copied)."""
    dy2d = dy.reshape(shape)
    return dy2d if dy2d.stride(-1) == 1 else dy2d.contiguous()


def backward_row_plan(n_cols: int, tile_elements: int):
    """RMSNorm's row tiling (rms_norm.plan_tiles) with an op's own backward tile size."""
    from liger_ops_cuda.rms_norm import _plan

    return _plan(
        n_cols, tile_elements, hardware.BACKWARD_ELEMENTS_PER_WARP, hardware.MAX_FUSED_BLOCK, hardware.CHUNK_BLOCK
    )


def backward_programs(n_rows: int, block_m: int, device: torch.device, programs: int | None = None) -> tuple[int, int]:
    """(programs, rows per program) of a persistent backward grid: one program per SM."""
    if programs is None:
        programs = hardware.sm_count(device.index) * hardware.BACKWARD_PROGRAMS_PER_SM
    programs = max(1, min(programs, triton.cdiv(max(n_rows, 1), block_m)))
    return programs, (triton.cdiv(n_rows, programs) if n_rows else 0)


@triton.jit
def tanh_f32(z):
    # tanh from one exp, without overflow: sign(z) * (1 - e^{-2|z|}) / (1 + e^{-2|z|}).
    t = tl.exp(-2.0 * tl.abs(z))
    r = (1.0 - t) / (1.0 + t)
    return tl.where(z < 0, -r, r)
