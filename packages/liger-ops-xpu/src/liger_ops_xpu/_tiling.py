"""Launch plans shared by the kernels of this package: row tiles, persistent grids, flat blocks.

Every size comes from ``hardware`` (read at call time, so tests can lower the caps and force a
code path); nothing here is a kernel.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton

from liger_ops_xpu import hardware


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
    return TilePlan(block_m, block_n, n_chunks, hardware.num_warps_for(block_m * block_n, sub_group))


def eu_device_index(device: torch.device) -> int | None:
    return device.index if device.type == "xpu" else None


def persistent_grid(n_tiles: int, num_warps: int, device: torch.device) -> tuple[int, int]:
    """``(programs, tiles_per_program)`` for a kernel that walks tiles and keeps one partial
    result per program (two-stage reductions): at most as many programs as the device keeps
    resident (EU count), at most one per tile, every program with at least one tile."""
    programs = max(1, min(hardware.persistent_programs(num_warps, eu_device_index(device)), n_tiles))
    tiles_per_program = triton.cdiv(max(n_tiles, 1), programs)
    return triton.cdiv(max(n_tiles, 1), tiles_per_program), tiles_per_program


def backward_grid(n_rows: int, plan: TilePlan, device: torch.device) -> tuple[int, int]:
    """The persistent grid over the row tiles of ``plan``."""
    return persistent_grid(triton.cdiv(n_rows, plan.block_m), plan.num_warps, device)


def static_trips(kernel, trips: int) -> int:
    """The STATIC_TILES constexpr: the loop count itself in the interpreter (whose int arguments
    ``range`` rejects from NumPy 2.4), 0 on the device (a runtime trip count, no recompiles)."""
    return trips if hardware.interpreting(kernel) else 0


def as_rows(t: torch.Tensor, n_cols: int) -> torch.Tensor:
    """``t`` as ``(-1, n_cols)`` rows with unit column stride (a copy only where needed)."""
    t2d = t.reshape(math.prod(t.shape[:-1]), n_cols)  # not -1: ambiguous when n_cols == 0
    return t2d if t2d.stride(-1) == 1 or n_cols <= 1 else t2d.contiguous()


@dataclass(frozen=True)
class FlatPlan:
    """A 1-D grid over ``numel`` elements in blocks of ``block`` (elementwise kernels)."""

    block: int
    num_warps: int
    programs: int


def plan_flat(numel: int) -> FlatPlan:
    block = min(hardware.ELEMENTWISE_BLOCK, triton.next_power_of_2(max(numel, 1)))
    warps = max(1, min(hardware.ELEMENTWISE_NUM_WARPS, block // (hardware.DEFAULT_SUB_GROUP_SIZE * 4)))
    warps = 1 << (warps.bit_length() - 1)
    return FlatPlan(block, warps, triton.cdiv(max(numel, 1), block))
