"""Tile-plan helpers shared by the kernels of this package.

Two shapes of work cover every op here:

- row plans (`row_plan`): ``n_rows`` independent rows of ``n_cols`` elements (norms,
  softmax, losses over a vocabulary). A tile is ``block_m`` rows x ``block_n`` columns;
  short rows share a tile, rows wider than the UB allows are walked in ``block_n``-wide
  chunks (``n_chunks > 1``). One program per vector core (never more programs than row
  blocks), each walking the row blocks ``pid, pid + programs, ...``.
- flat plans (`flat_plan`): ``n`` independent elements (swiglu, geglu): blocks of
  ``block`` elements walked by one program per vector core.

Each op describes the tiles its kernels keep live as a function of the tile shape; the
helpers pick the largest power-of-two tile whose live set fits the UB budget and return
the `KernelPlan`s that `launch.launch` checks again before every launch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import triton

from liger_ops_ascend import hardware
from liger_ops_ascend.launch import AscendLaunchError, KernelPlan, Tile

FP32 = 4
# Most rows in one tile: more only lengthens the per-row vectors without saving a DMA.
MAX_BLOCK_M = 256
# Widest tile along a row; the chunk width cap.
MAX_BLOCK_N = 65536
# Row strides beyond this would overflow the int32 offsets inside a tile of MAX_BLOCK_M rows.
MAX_ROW_STRIDE = (2**31 - 1) // (MAX_BLOCK_M + 1)

# Tiles of one kernel as a function of the tile shape (rows, columns).
RowTiles = Callable[[int, int], Sequence[Tile]]
# Tiles of one kernel as a function of the block length.
FlatTiles = Callable[[int], Sequence[Tile]]


def elem_bytes(dtype: torch.dtype | None) -> int:
    """Bytes per element, 0 for an absent tensor (its tiles then drop out)."""
    return 0 if dtype is None else dtype.itemsize


def prev_pow2(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def f32_copy(name: str, rows: int, cols: int, nbytes: int) -> list[Tile]:
    """The fp32 working copy of a loaded tile: none when the data already is fp32."""
    return [] if nbytes in (0, FP32) else [Tile(f"{name}_f32", rows, cols, FP32)]


def loaded(name: str, rows: int, cols: int, nbytes: int) -> list[Tile]:
    """A tile loaded in its own dtype plus its fp32 working copy (nothing if absent)."""
    if not nbytes:
        return []
    return [Tile(name, rows, cols, nbytes), *f32_copy(name, rows, cols, nbytes)]


@dataclass(frozen=True)
class RowPlan:
    """Tile shape and launch of one row-wise pass over ``(n_rows, n_cols)``."""

    block_m: int
    block_n: int
    n_chunks: int
    programs: int
    n_iters: int
    n_blocks: int
    kernels: tuple[KernelPlan, ...]

    @property
    def chunked(self) -> bool:
        return self.n_chunks > 1


def row_plan(
    op: str,
    n_rows: int,
    n_cols: int,
    single: Sequence[tuple[str, RowTiles]],
    chunked: Sequence[tuple[str, RowTiles]],
    hw: hardware.Hardware,
    min_n: int,
    max_block_m: int = MAX_BLOCK_M,
    max_block_n: int = MAX_BLOCK_N,
) -> RowPlan:
    """The largest tile whose kernels fit the UB: whole rows (``single`` kernels) when one
    row fits, else ``chunked`` kernels over the widest chunk that fits; then as many rows
    per tile as fit, leaving every vector core at least one row block.

    ``min_n``: fewest columns of a tile (one 32-byte block of the narrowest dtype).
    """
    budget = hw.ub_budget

    def worst(kernels: Sequence[tuple[str, RowTiles]], m: int, n: int) -> int:
        return max(sum(t.nbytes for t in tiles(m, n)) for _, tiles in kernels)

    block_n = max(min_n, min(triton.next_power_of_2(max(n_cols, 1)), max_block_n))
    kernels = single if block_n >= n_cols else chunked
    while block_n > min_n and worst(kernels, 1, block_n) > budget:
        block_n //= 2
        kernels = chunked
    if worst(kernels, 1, block_n) > budget:
        raise AscendLaunchError(
            f"liger-ops-ascend {op}: even a 1x{block_n} tile needs {worst(kernels, 1, block_n)} bytes of UB; "
            f"{hw.describe_budget()}"
        )
    block_m = 1
    m_cap = min(max_block_m, prev_pow2(triton.cdiv(n_rows, hw.vector_cores)))
    while block_m * 2 <= m_cap and worst(kernels, block_m * 2, block_n) <= budget:
        block_m *= 2
    n_blocks = triton.cdiv(max(n_rows, 1), block_m)
    programs = min(hw.vector_cores, n_blocks)
    grid = (programs,)
    return RowPlan(
        block_m=block_m,
        block_n=block_n,
        n_chunks=triton.cdiv(max(n_cols, 1), block_n),
        programs=programs,
        n_iters=triton.cdiv(n_blocks, programs),
        n_blocks=n_blocks,
        kernels=tuple(KernelPlan(name, grid, tuple(tiles(block_m, block_n))) for name, tiles in kernels),
    )


@dataclass(frozen=True)
class FlatPlan:
    """Block length and launch of an elementwise pass over ``n`` elements."""

    block: int
    programs: int
    n_iters: int
    n_blocks: int
    kernels: tuple[KernelPlan, ...]


def flat_plan(
    op: str,
    n: int,
    kernels: Sequence[tuple[str, FlatTiles]],
    hw: hardware.Hardware,
    min_block: int,
    max_block: int = MAX_BLOCK_N,
) -> FlatPlan:
    """The largest block (a power of two) whose kernels fit the UB, no longer than needed
    to give every vector core a block; one program per vector core, grid-stride over blocks."""
    budget = hw.ub_budget

    def worst(block: int) -> int:
        return max(sum(t.nbytes for t in tiles(block)) for _, tiles in kernels)

    block = max(min_block, min(max_block, triton.next_power_of_2(max(1, triton.cdiv(n, hw.vector_cores)))))
    while block > min_block and worst(block) > budget:
        block //= 2
    if worst(block) > budget:
        raise AscendLaunchError(
            f"liger-ops-ascend {op}: even a block of {block} needs {worst(block)} bytes of UB; {hw.describe_budget()}"
        )
    n_blocks = triton.cdiv(max(n, 1), block)
    programs = min(hw.vector_cores, n_blocks)
    return FlatPlan(
        block=block,
        programs=programs,
        n_iters=triton.cdiv(n_blocks, programs),
        n_blocks=n_blocks,
        kernels=tuple(KernelPlan(name, (programs,), tuple(tiles(block))) for name, tiles in kernels),
    )


def rows_view(t: torch.Tensor, n_cols: int) -> torch.Tensor:
    """``t`` as a ``(rows, n_cols)`` view with unit column stride (a copy only if needed)."""
    t2 = t.reshape(-1, n_cols)
    if t2.stride(-1) != 1 or t2.stride(0) > MAX_ROW_STRIDE:
        t2 = t2.contiguous()
    return t2


def partial_sums(partials: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Second stage of a two-stage reduction: the per-program fp32 partial rows summed."""
    return partials.sum(0).to(dtype)
