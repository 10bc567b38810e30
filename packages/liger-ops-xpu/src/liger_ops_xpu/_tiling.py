"""Host-side helpers shared by the op modules: row views, tile plans (row tiles, flat and 2-D
elementwise blocks, fused-linear token chunks), their launches, persistent grids and their
partial sums.

Every size comes from ``hardware`` (read at call time, so tests can lower the caps and force a
code path); nothing here is a kernel.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton
from liger_core.memory_budget import chunk_rows, current_memory_budget

from liger_ops_xpu import hardware

# -- row views ---------------------------------------------------------------------------------


def as_rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` (an input or its incoming gradient) as ``(rows, t.shape[-1])`` with unit column
    stride (a copy only where needed)."""
    n_cols = t.shape[-1]
    t2d = t.reshape(math.prod(t.shape[:-1]), n_cols)  # not -1: ambiguous when n_cols == 0
    return t2d if t2d.stride(-1) == 1 or n_cols <= 1 else t2d.contiguous()


def unit_col(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself where its last dimension is contiguous, else a contiguous copy (kernels
    index rows by stride and columns by 1)."""
    return t if t.stride(-1) == 1 else t.contiguous()


# -- sub-groups --------------------------------------------------------------------------------


def prev_power_of_2(n: int) -> int:
    """The largest power of two <= ``n`` (``n >= 1``): ``num_warps`` must be a power of two."""
    return 1 << (n.bit_length() - 1)


def num_warps_for(block_elements: int, sub_group: int = hardware.DEFAULT_SUB_GROUP_SIZE) -> int:
    """Sub-groups for a tile of this many elements: a power of two giving each lane about
    ``ELEMENTS_PER_LANE`` values, between ``MIN_NUM_WARPS`` and 32 (the large-GRF cap)."""
    wanted = max(1, block_elements // (sub_group * hardware.ELEMENTS_PER_LANE))
    return max(hardware.MIN_NUM_WARPS, min(hardware.MAX_NUM_WARPS_LARGE_GRF, prev_power_of_2(wanted)))


def elementwise_num_warps(block_elements: int) -> int:
    """Sub-groups for an elementwise block: up to ``ELEMENTWISE_NUM_WARPS``, fewer for small
    blocks so every lane keeps at least ``ELEMENTWISE_MIN_ELEMENTS_PER_LANE``; a power of two."""
    lanes_worth = block_elements // (hardware.DEFAULT_SUB_GROUP_SIZE * hardware.ELEMENTWISE_MIN_ELEMENTS_PER_LANE)
    return prev_power_of_2(max(1, min(hardware.ELEMENTWISE_NUM_WARPS, lanes_worth)))


# -- tile plans --------------------------------------------------------------------------------


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

    def tiles(self, n_rows: int) -> int:
        """Row tiles over ``n_rows`` rows (the forward kernels' grid: one program per tile)."""
        return triton.cdiv(n_rows, self.block_m)


def _sub_group(device: torch.device) -> int:
    return hardware.sub_group_size(device.index) if device.type == "xpu" else hardware.DEFAULT_SUB_GROUP_SIZE


def plan_tiles(n_cols: int, device: torch.device | str | None = None, max_fused_block: int | None = None) -> TilePlan:
    """Tile shape for rows of ``n_cols``: whole rows (several when short) or chunks when wide.

    Rows up to ``max_fused_block`` (default ``hardware.MAX_FUSED_BLOCK``; rounded up to a power
    of two) stay in one tile, packed until a tile holds about ``TARGET_TILE_ELEMENTS``; wider
    rows go in ``CHUNK_BLOCK``-wide chunks. Kernels that keep more live tiles per element pass
    a lower ``max_fused_block``.
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    cap = hardware.MAX_FUSED_BLOCK if max_fused_block is None else min(max_fused_block, hardware.MAX_FUSED_BLOCK)
    return _plan(
        n_cols,
        _sub_group(device),
        cap,
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
    return TilePlan(block_m, block_n, n_chunks, num_warps_for(block_m * block_n, sub_group))


@dataclass(frozen=True)
class FlatPlan:
    """A 1-D grid over ``numel`` elements in blocks of ``block`` (elementwise kernels)."""

    block: int
    num_warps: int
    programs: int


def plan_flat(numel: int) -> FlatPlan:
    block = min(hardware.ELEMENTWISE_BLOCK, triton.next_power_of_2(max(numel, 1)))
    return FlatPlan(block, elementwise_num_warps(block), triton.cdiv(max(numel, 1), block))


@dataclass(frozen=True)
class BlockPlan:
    """A 2-D grid of [BLOCK_M rows x BLOCK_N columns] blocks for elementwise ops with per-column
    data or no row-wide reduction (dyt, the divergences): no row is ever held whole."""

    block_m: int
    block_n: int
    num_warps: int

    def grid(self, n_rows: int, n_cols: int) -> tuple[int, int]:
        """One program per block: (row blocks, column blocks)."""
        return triton.cdiv(n_rows, self.block_m), triton.cdiv(n_cols, self.block_n)


def plan_blocks(n_cols: int) -> BlockPlan:
    """Columns in ``ELEMENTWISE_COL_BLOCK``-wide blocks, rows filling ``ELEMENTWISE_BLOCK``."""
    block_n = min(triton.next_power_of_2(max(n_cols, 1)), hardware.ELEMENTWISE_COL_BLOCK)
    block_m = max(1, hardware.ELEMENTWISE_BLOCK // block_n)
    return BlockPlan(block_m, block_n, elementwise_num_warps(block_m * block_n))


def plan_chunks(n_rows: int, vocab: int, bytes_per_logit: int = 4) -> int:
    """Tokens per chunk of the fused-linear losses whose chunk buffers cost ``bytes_per_logit``
    bytes per logit: within the memory budget in force (`liger_core.memory_budget`, default
    ``FUSED_LINEAR_MEMORY_BUDGET``), a multiple of ``FUSED_LINEAR_ROW_MULTIPLE`` when that fits,
    at least one row, never more than there are."""
    budget = current_memory_budget(hardware.FUSED_LINEAR_MEMORY_BUDGET)
    return chunk_rows(n_rows, max(vocab, 1) * bytes_per_logit, budget, hardware.FUSED_LINEAR_ROW_MULTIPLE)


# -- launches ----------------------------------------------------------------------------------


def launch_row_tiles(kernel, programs: int, plan: TilePlan, device: torch.device, *args, **constexprs) -> None:
    """Launch a row-tile kernel on ``programs`` programs with ``plan``'s tile constexprs
    (BLOCK_M, BLOCK_N, N_CHUNKS), its sub-groups and the large register file."""
    kernel[(programs,)](
        *args,
        BLOCK_M=plan.block_m,
        BLOCK_N=plan.block_n,
        N_CHUNKS=plan.n_chunks,
        **constexprs,
        **hardware.launch_kwargs(kernel, device, plan.num_warps),
    )


def launch_blocks(kernel, grid: tuple[int, int], plan: BlockPlan, device: torch.device, *args, **constexprs) -> None:
    """Launch a 2-D elementwise kernel on ``grid`` with ``plan``'s BLOCK_M / BLOCK_N and its
    sub-groups, in the default register file (streaming kernels: dyt, the divergences)."""
    kernel[grid](
        *args,
        BLOCK_M=plan.block_m,
        BLOCK_N=plan.block_n,
        **constexprs,
        **hardware.launch_kwargs(kernel, device, plan.num_warps, register_heavy=False),
    )


def launch_rows(kernel, plan: TilePlan, rows: tuple[torch.Tensor, ...], **constexprs) -> None:
    """One program per row tile of ``plan`` over ``rows`` (``(n_rows, n_cols)`` tensors, unit
    column stride): the kernel's arguments are the tensors, their row strides, ``n_rows`` and
    ``n_cols`` (softmax, sparsemax). Nothing is launched for empty rows."""
    n_rows, n_cols = rows[0].shape
    if n_rows and n_cols:
        args = (*rows, *(t.stride(0) for t in rows), n_rows, n_cols)
        launch_row_tiles(kernel, plan.tiles(n_rows), plan, rows[0].device, *args, **constexprs)


def launch_flat(kernel, n: int, device: torch.device, *args, **constexprs) -> None:
    """Launch an elementwise kernel over ``n`` elements on `plan_flat`'s grid (arguments: ``args``,
    ``n``, BLOCK, ``constexprs``), in the default register file: streaming kernels want more
    threads resident, not more registers. Nothing is launched for ``n == 0``."""
    if n:
        plan = plan_flat(n)
        kernel[(plan.programs,)](
            *args,
            n,
            BLOCK=plan.block,
            **constexprs,
            **hardware.launch_kwargs(kernel, device, plan.num_warps, register_heavy=False),
        )


def static_trips(kernel, trips: int) -> int:
    """The STATIC_TILES constexpr: the loop count itself in the interpreter (whose int arguments
    ``range`` rejects from NumPy 2.4), 0 on the device (a runtime trip count, no recompiles)."""
    return trips if hardware.interpreting(kernel) else 0


# -- persistent grids and their per-program partial sums ----------------------------------------


def eu_device_index(device: torch.device) -> int | None:
    return device.index if device.type == "xpu" else None


def persistent_grid(n_tiles: int, num_warps: int, device: torch.device, n_col_blocks: int = 1) -> tuple[int, int]:
    """``(programs, tiles_per_program)`` for a kernel that walks tiles and keeps one partial
    result per program (two-stage reductions): at most as many programs as the device keeps
    resident (EU count; shared out among ``n_col_blocks`` column blocks that run side by side),
    at most one per tile, every program with at least one tile."""
    resident = hardware.persistent_programs(num_warps, eu_device_index(device)) // n_col_blocks
    programs = max(1, min(resident, n_tiles))
    tiles_per_program = triton.cdiv(max(n_tiles, 1), programs)
    return triton.cdiv(max(n_tiles, 1), tiles_per_program), tiles_per_program


def backward_grid(
    n_rows: int, plan: TilePlan | BlockPlan, device: torch.device, n_col_blocks: int = 1
) -> tuple[int, int]:
    """The persistent grid over the row tiles of ``plan`` (per column block, for 2-D plans)."""
    return persistent_grid(triton.cdiv(n_rows, plan.block_m), plan.num_warps, device, n_col_blocks)


def partial_rows(programs: int, n_cols: int, plan: TilePlan, device: torch.device) -> torch.Tensor:
    """One fp32 partial row per backward program, for a parameter's gradient (`sum_partials`);
    chunked plans add to it chunk by chunk (`_jit.add_to_partial`), so it starts at zero."""
    alloc = torch.zeros if plan.chunked else torch.empty
    return alloc((programs, n_cols), dtype=torch.float32, device=device)


def sum_partials(partial: torch.Tensor | None, like: torch.Tensor | None) -> torch.Tensor | None:
    """A parameter's gradient from the backward programs' fp32 partial rows: their sum, in
    ``like``'s dtype (None where there is no such parameter)."""
    return None if like is None else partial.sum(0).to(like.dtype)


def zeros_or_none(param: torch.Tensor | None) -> torch.Tensor | None:
    """A zero gradient for an optional parameter (empty inputs: nothing was summed)."""
    return None if param is None else torch.zeros_like(param)
