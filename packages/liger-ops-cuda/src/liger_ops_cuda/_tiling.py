"""Host-side helpers shared by several op modules: ``(-1, hidden)`` row views, row tile plans,
persistent backward grids, the flat elementwise launch, per-program partial sums of parameter
gradients (deterministic, no atomics), token chunks and weight-gradient GEMMs of the fused
linear losses, and the in-place rescaling of a gradient by its incoming gradient.

Every size comes from ``hardware`` (read at call time, so tests can lower a cap and force a
code path).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from liger_core.memory_budget import chunk_rows, current_memory_budget
from liger_ops_cuda import hardware

# The Triton interpreter runs programs one after another, each at a fixed cost: there the
# partial sums use few wide programs instead of the GPU's many narrow ones.
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
_INTERPRETER_REDUCE_BLOCK = 4096


# -- rows ---------------------------------------------------------------------------------------


def as_rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as ``(rows, hidden)`` with unit column stride (a copy only when needed)."""
    x2d = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])  # explicit rows: hidden may be 0
    return x2d if x2d.stride(-1) == 1 or x2d.shape[-1] <= 1 else x2d.contiguous()


def contiguous(t: torch.Tensor | None) -> torch.Tensor | None:
    """``t.contiguous()``, None for None (optional inputs: class weights, labels)."""
    return None if t is None else t.contiguous()


def flat(t: torch.Tensor) -> torch.Tensor:
    """The elements of ``t`` in logical order, flat: elementwise ops read several inputs in one
    order (a copy only for non-contiguous inputs)."""
    return t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)


def grad_rows(dy: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """An incoming gradient as rows of ``shape`` with unit column stride (a gradient broadcast
    over the columns is copied; one broadcast over the rows is not)."""
    dy2d = dy.reshape(shape)
    return dy2d if dy2d.stride(-1) == 1 else dy2d.contiguous()


# -- row tile plans -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TilePlan:
    """BLOCK_M rows x BLOCK_N columns per tile; ``chunked``: one row per tile in BLOCK_N-wide
    chunks (rows wider than the fused cap)."""

    block_m: int
    block_n: int
    chunked: bool
    num_warps: int

    def row_grid(self, n_rows: int) -> tuple[int]:
        """One program per tile of BLOCK_M rows."""
        return (triton.cdiv(n_rows, self.block_m),)

    def launch(self, kernel, grid: tuple[int, ...], *args, **constexprs) -> None:
        """``kernel[grid](*args, **constexprs)`` with this plan's BLOCK_M, BLOCK_N, CHUNKED and warps."""
        kernel[grid](
            *args,
            BLOCK_M=self.block_m,
            BLOCK_N=self.block_n,
            CHUNKED=self.chunked,
            num_warps=self.num_warps,
            **constexprs,
        )


@functools.lru_cache(maxsize=256)  # called on every op call; the sizes are part of the key
def plan_rows(n_cols: int, tile_elements: int, per_warp: int, max_fused_block: int, chunk_block: int) -> TilePlan:
    """Whole rows (several per tile when short, up to ``tile_elements``), or chunks of
    ``chunk_block`` for rows wider than ``max_fused_block``."""
    block_n = triton.next_power_of_2(max(n_cols, 1))
    if block_n > max_fused_block:
        chunk = min(chunk_block, max_fused_block)
        return TilePlan(1, chunk, True, hardware.num_warps_for(chunk, per_warp))
    block_m = max(1, min(tile_elements // block_n, 64))
    return TilePlan(block_m, block_n, False, hardware.num_warps_for(block_m * block_n, per_warp))


def plan_norm_rows(n_cols: int, tile_elements: int, per_warp: int, chunk_block: int | None = None) -> TilePlan:
    """The norms' row tiles with an op's own tile and warp sizes: whole rows up to MAX_FUSED_BLOCK,
    chunks of ``chunk_block`` (default CHUNK_BLOCK) above."""
    return plan_rows(n_cols, tile_elements, per_warp, hardware.MAX_FUSED_BLOCK, chunk_block or hardware.CHUNK_BLOCK)


def plan_tiles(n_cols: int, backward: bool = False) -> TilePlan:
    """The memory-bound norms' tiles for rows of ``n_cols`` (RMSNorm's tuned sizes)."""
    if backward:
        return plan_backward_tiles(n_cols, hardware.BACKWARD_TILE_ELEMENTS)
    return plan_norm_rows(n_cols, hardware.FORWARD_TILE_ELEMENTS, hardware.FORWARD_ELEMENTS_PER_WARP)


def plan_backward_tiles(n_cols: int, tile_elements: int) -> TilePlan:
    """RMSNorm's backward tiling with an op's own backward tile size."""
    return plan_norm_rows(n_cols, tile_elements, hardware.BACKWARD_ELEMENTS_PER_WARP)


def plan_softmax_rows(n_cols: int) -> TilePlan:
    """Softmax's and sparsemax's tiles: whole rows in registers up to SOFTMAX_MAX_FUSED_BLOCK."""
    return plan_rows(
        n_cols,
        hardware.SOFTMAX_TILE_ELEMENTS,
        hardware.SOFTMAX_ELEMENTS_PER_WARP,
        hardware.SOFTMAX_MAX_FUSED_BLOCK,
        hardware.SOFTMAX_CHUNK_BLOCK,
    )


def backward_programs(n_rows: int, block_m: int, device: torch.device, programs: int | None = None) -> tuple[int, int]:
    """(programs, rows per program) of a persistent backward grid: one program per SM."""
    if programs is None:
        programs = hardware.sm_count(device.index) * hardware.BACKWARD_PROGRAMS_PER_SM
    programs = max(1, min(programs, triton.cdiv(max(n_rows, 1), block_m)))
    return programs, (triton.cdiv(n_rows, programs) if n_rows else 0)


# -- flat elementwise launches -----------------------------------------------------------------


def launch_flat(kernel, n: int, *args, block: int | None = None, **constexprs) -> None:
    """An elementwise kernel over ``n`` elements, one program per ``block`` of them (default
    GLU_BLOCK) with GLU_NUM_WARPS warps; its arguments: ``args``, ``n``, BLOCK and ``constexprs``
    (swiglu, geglu, relu_squared). Nothing is launched for ``n == 0``."""
    if n:
        block = block or hardware.GLU_BLOCK
        kernel[(triton.cdiv(n, block),)](*args, n, BLOCK=block, num_warps=hardware.GLU_NUM_WARPS, **constexprs)


# -- per-program partial sums -----------------------------------------------------------------


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


# -- gradients computed in forward ------------------------------------------------------------


@triton.jit
def _scale_unless_one_kernel(G, UP, n_elements, BLOCK: tl.constexpr):
    # Multiply G in place by the scalar UP[0], unless it is 1 (then every program exits at once):
    # the common `loss.backward()` costs one tiny launch and no host synchronisation.
    g = tl.load(UP).to(tl.float32)
    if g == 1.0:
        return
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    v = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(G + offs, (v * g).to(G.dtype.element_ty), mask=mask)


def scale_unless_one(grad: torch.Tensor | None, upstream: torch.Tensor) -> None:
    """``grad *= upstream`` in place (grad contiguous, created by the op), skipped on device when 1."""
    if grad is None or grad.numel() == 0:
        return
    assert grad.is_contiguous()
    block = hardware.SCALE_BLOCK
    _scale_unless_one_kernel[(triton.cdiv(grad.numel(), block),)](
        grad, upstream, grad.numel(), BLOCK=block, num_warps=hardware.SCALE_NUM_WARPS
    )


# -- fused linear losses ------------------------------------------------------------------------


def plan_chunks(n_tokens: int, vocab: int, bytes_per_logit: int = 2) -> int:
    """Tokens per chunk of a fused linear loss whose chunk buffers cost ``bytes_per_logit`` bytes
    per logit, within the memory budget in force (`liger_core.memory_budget`; default
    FUSED_LINEAR_MEMORY_BUDGET): a multiple of FUSED_LINEAR_ROW_MULTIPLE when that fits, never
    more than the tokens there are (at least 1)."""
    nbytes = current_memory_budget(hardware.FUSED_LINEAR_MEMORY_BUDGET)
    return chunk_rows(n_tokens, max(vocab, 1) * bytes_per_logit, nbytes, hardware.FUSED_LINEAR_ROW_MULTIPLE)


def logits_fp32(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x @ w.T`` in float32 without rounding the products to the input dtype first (the fused
    linear losses' logits: tensor cores with an fp32 output where cuBLAS offers it)."""
    if x.dtype == torch.float32:
        return x @ w.t()
    if x.is_cuda:
        try:
            return torch.mm(x, w.t(), out_dtype=torch.float32)
        except (TypeError, RuntimeError):
            pass
    return x.float() @ w.float().t()


def accumulate_weight_grad(gw: torch.Tensor, g: torch.Tensor, x: torch.Tensor, first: bool) -> None:
    """``gw (+)= g^T @ x`` with gw in its own dtype (fp32 accumulation of bf16 GEMMs via
    out_dtype where cuBLAS offers it)."""
    gt = g.t()
    if gw.dtype == g.dtype:
        if first:
            torch.mm(gt, x, out=gw)
        else:
            gw.addmm_(gt, x)
        return
    if gw.is_cuda:
        try:
            torch.addmm(gw, gt, x, beta=0.0 if first else 1.0, out_dtype=gw.dtype, out=gw)
            return
        except (TypeError, RuntimeError):
            pass  # older torch: fall through (a temporary of grad_W's size)
    prod = torch.mm(gt, x).to(gw.dtype)
    if first:
        gw.copy_(prod)
    else:
        gw.add_(prod)
