"""Host-side helpers shared by the op modules of this package: tile plans, row views,
per-program partial sums, token chunks.

Two shapes of work cover every op here:

- row plans (`plan_rows`): ``n_rows`` independent rows of ``n_cols`` elements (norms,
  softmax, losses over a vocabulary). A tile is ``block_m`` rows x ``block_n`` columns;
  short rows share a tile, rows wider than the UB allows are walked in ``block_n``-wide
  chunks (``n_chunks > 1``). One program per vector core (never more programs than row
  blocks), each walking the row blocks ``pid, pid + programs, ...``.
- flat plans (`plan_flat`): ``n`` independent elements (swiglu, geglu): blocks of
  ``block`` elements walked by one program per vector core.

Each op describes the tiles its kernels keep live as a function of the tile shape, in the
terms of the UB model (``ub_model.md``: `dma` buffers of a loop count twice, `once` buffers
once, `work` tiles at the kernel's peak); the helpers pick the largest power-of-two tile whose
live set fits the UB budget and return the `KernelPlan`s that `launch.launch` checks again
before every launch. Tile shapes depend on the row width, the dtypes and the row pitches,
never on the row count, so a new batch size never compiles a new kernel.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import triton
from liger_core.memory_budget import chunk_rows, current_memory_budget

from liger_ops_ascend import hardware
from liger_ops_ascend.launch import AscendLaunchError, KernelPlan, Tile, launch

FP32 = 4
# Row strides beyond this would overflow the int32 offsets inside a tile of MAX_BLOCK_M rows.
MAX_ROW_STRIDE = hardware.INT32_MAX // (hardware.MAX_BLOCK_M + 1)

# A kernel of a row plan: its name, and its live tiles as a function of the tile shape (rows,
# columns) and of the plan's sizes (element bytes, options) as keywords.
RowKernel = tuple[str, Callable[..., Sequence[Tile]]]
# Tiles of one kernel as a function of the block length.
FlatTiles = Callable[[int], Sequence[Tile]]


def elem_bytes(dtype: torch.dtype | None) -> int:
    """Bytes per element, 0 for an absent tensor (its tiles then drop out)."""
    return 0 if dtype is None else dtype.itemsize


def strides_of(*tensors: torch.Tensor | None) -> list[tuple[int, int]]:
    """(row stride in elements, element bytes) of each present ``(rows, cols)`` tensor, as
    `plan_rows` takes them."""
    return [(t.stride(0), t.element_size()) for t in tensors if t is not None]


# -- the terms of the UB model (ub_model.md) ---------------------------------------------------


def dma(name: str, rows: int, cols: int, nbytes: int) -> list[Tile]:
    """A buffer that a loop loads from or stores to HBM, in its own dtype: multi-buffered
    (nothing if the tensor is absent)."""
    return [Tile(name, rows, cols, nbytes, hardware.UB_MULTI_BUFFER)] if nbytes else []


def once(name: str, rows: int, cols: int, nbytes: int) -> list[Tile]:
    """A buffer a program fills once (a weight loaded before its loop, an accumulator)."""
    return [Tile(name, rows, cols, nbytes)] if nbytes else []


def f32_copy(name: str, rows: int, cols: int, nbytes: int) -> list[Tile]:
    """The fp32 working copy of a loaded tile: none when the data already is fp32 (or absent)."""
    return [] if nbytes in (0, FP32) else [Tile(f"{name}_f32", rows, cols, FP32)]


def work(name: str, rows: int, cols: int, count: int, nbytes: int = FP32) -> list[Tile]:
    """``count`` computed tiles live at the kernel's peak (the compiler reuses the buffers of
    values that are dead by then, so this is the peak, not the number of named values)."""
    return [Tile(f"{name}{i}", rows, cols, nbytes) for i in range(count)]


def rows_f32(names: Sequence[str], m: int) -> list[Tile]:
    """Per-row fp32 vectors of a tile of ``m`` rows (statistics, coefficients)."""
    return [Tile(name, 1, m, FP32) for name in names]


def mask(rows: int, cols: int) -> list[Tile]:
    """The tile's boolean mask, one byte an element."""
    return [Tile("mask", rows, cols, 1)]


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


def plan_rows(
    op: str,
    n_rows: int,
    n_cols: int,
    single: Sequence[RowKernel],
    chunked: Sequence[RowKernel],
    hw: hardware.Hardware,
    elem_sizes: Mapping[str, int],
    row_strides: Sequence[tuple[int, int]] | None = None,
    **options: object,
) -> RowPlan:
    """The largest tile whose kernels fit the UB: whole rows (``single`` kernels) when one
    row fits, else ``chunked`` kernels over the widest chunk that fits; then as many rows
    per tile as fit (one when a row pitch is not 32-byte aligned, and no more than keep the
    int32 offsets inside a tile from wrapping).

    ``elem_sizes``: the element bytes of the op's tensors (0: absent), the tile functions'
    keywords with ``options``; a tile is at least one 32-byte block of the narrowest dtype.
    ``row_strides``: (row stride in elements, element bytes) of each tensor the tiles span
    rows of; default dense ``n_cols``-wide rows of every present dtype. The tile shape does
    not depend on ``n_rows`` (no recompile per batch size); the grid does. Tile shapes are
    cached; the tile caps are read from `hardware` at each call.
    """
    min_n = max(hardware.min_block(b) for b in elem_sizes.values() if b)
    if row_strides is None:
        row_strides = [(n_cols, b) for b in elem_sizes.values() if b]
    pitches = tuple(sorted({stride * b for stride, b in row_strides}))
    max_stride = max((stride for stride, _ in row_strides), default=n_cols)
    sizes = tuple(sorted({**elem_sizes, **options}.items()))
    block_m, block_n, tiles = _row_tiles(
        op, n_cols, tuple(single), tuple(chunked), sizes, hw, min_n, pitches, max_stride,
        hardware.MAX_BLOCK_M, hardware.MAX_BLOCK_N,
    )  # fmt: skip
    n_blocks = triton.cdiv(max(n_rows, 1), block_m)
    programs = min(hw.vector_cores, n_blocks)
    n_chunks = triton.cdiv(max(n_cols, 1), block_n)
    extent = (block_m - 1) * max_stride + block_n * n_chunks
    return RowPlan(
        block_m=block_m,
        block_n=block_n,
        n_chunks=n_chunks,
        programs=programs,
        n_iters=triton.cdiv(n_blocks, programs),
        n_blocks=n_blocks,
        kernels=tuple(KernelPlan(name, (programs,), t, block_m, pitches, extent) for name, t in tiles),
    )


@functools.lru_cache(maxsize=4096)
def _row_tiles(
    op: str,
    n_cols: int,
    single: tuple[RowKernel, ...],
    chunked: tuple[RowKernel, ...],
    sizes: tuple[tuple[str, object], ...],
    hw: hardware.Hardware,
    min_n: int,
    pitches: tuple[int, ...],
    max_stride: int,
    max_block_m: int,
    max_block_n: int,
) -> tuple[int, int, tuple[tuple[str, tuple[Tile, ...]], ...]]:
    """(block_m, block_n, per kernel its tiles) of `plan_rows`."""
    budget = hw.ub_budget
    kw = dict(sizes)

    def worst(kernels: tuple[RowKernel, ...], m: int, n: int) -> int:
        return max(sum(t.nbytes for t in tiles(m, n, **kw)) for _, tiles in kernels)

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
    # Several rows per tile only over 32-byte aligned rows, and with int32 in-tile offsets.
    aligned = not any(p % hardware.ALIGN_BYTES for p in pitches)
    span = block_n * triton.cdiv(max(n_cols, 1), block_n)
    while (
        aligned
        and block_m * 2 <= max_block_m
        and (2 * block_m - 1) * max_stride + span <= hardware.INT32_MAX
        and worst(kernels, block_m * 2, block_n) <= budget
    ):
        block_m *= 2
    return block_m, block_n, tuple((name, tuple(tiles(block_m, block_n, **kw))) for name, tiles in kernels)


def row_kernels(
    op: str, forward_tiles: Callable[..., Sequence[Tile]], backward_tiles: Callable[..., Sequence[Tile]]
) -> dict[str, tuple[tuple[RowKernel, ...], tuple[RowKernel, ...]]]:
    """Per direction, the kernels of an op with one kernel a direction: for whole rows
    (``<op>_<direction>``) and for chunked rows (``<op>_<direction>_chunked``), as `plan_rows`
    takes them (the names are what the guard reports)."""
    return {
        direction: (((f"{op}_{direction}", tiles),), ((f"{op}_{direction}_chunked", tiles),))
        for direction, tiles in (("forward", forward_tiles), ("backward", backward_tiles))
    }


def launch_rows(
    kernel: Any, p: RowPlan, hw: hardware.Hardware, rows: Sequence[torch.Tensor], **constexprs: object
) -> None:
    """Launch a row kernel whose arguments are ``rows`` (``(n_rows, n_cols)`` tensors), their row
    strides, ``n_rows, n_cols, n_blocks, n_chunks`` and the tile shape (softmax, sparsemax)."""
    n_rows, n_cols = rows[0].shape
    launch(
        kernel, p.kernels[0], hw, *rows, *(t.stride(0) for t in rows), n_rows, n_cols, p.n_blocks, p.n_chunks,
        BLOCK_M=p.block_m, BLOCK_N=p.block_n, SINGLE_PASS=not p.chunked, **constexprs,
    )  # fmt: skip


@dataclass(frozen=True)
class FlatPlan:
    """Block length and launch of an elementwise pass over ``n`` elements."""

    block: int
    programs: int
    n_iters: int
    n_blocks: int
    kernels: tuple[KernelPlan, ...]


def plan_flat(
    op: str,
    n: int,
    kernels: Sequence[tuple[str, FlatTiles]],
    hw: hardware.Hardware,
    min_block: int,
    max_block: int,
) -> FlatPlan:
    """The largest block (a power of two, at most ``max_block``) whose kernels fit the UB,
    whatever ``n`` is (no recompile per size); one program per vector core (never more than
    blocks), grid-stride over blocks."""
    budget = hw.ub_budget

    def worst(block: int) -> int:
        return max(sum(t.nbytes for t in tiles(block)) for _, tiles in kernels)

    block = max(min_block, max_block)
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


def launch_flat(kernel: Any, n: int, p: FlatPlan, hw: hardware.Hardware, *args: object, **constexprs: object) -> None:
    """Launch an elementwise kernel over ``n`` elements on plan ``p``: its arguments ``args``,
    ``n``, the plan's block count, BLOCK and ``constexprs`` (swiglu, geglu, relu_squared)."""
    launch(kernel, p.kernels[0], hw, *args, n, p.n_blocks, BLOCK=p.block, **constexprs)


def as_rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` (an input or its incoming gradient) as a ``(-1, hidden)`` view with unit column
    stride and a row stride the int32 tile offsets can hold (a copy only if needed)."""
    t2 = t.reshape(-1, t.shape[-1])
    if t2.stride(-1) != 1 or t2.stride(0) > MAX_ROW_STRIDE:
        t2 = t2.contiguous()
    return t2


def aligned_rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` (rows in its last two dims) with unit column stride and 32-byte aligned row pitches:
    itself when it already has them, else a copy in padded rows (the tiles span several rows)."""
    if t.stride(-1) == 1 and (t.stride(-2) * t.element_size()) % hardware.ALIGN_BYTES == 0:
        return t
    return padded_empty(t.shape, t.dtype, t.device).copy_(t)


def padded_empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An uninitialised tensor whose rows (last dim) start 32 bytes apart or a multiple of it."""
    align = hardware.min_block(dtype.itemsize)
    cols = shape[-1]
    storage = torch.empty((*shape[:-1], triton.cdiv(max(cols, 1), align) * align), dtype=dtype, device=device)
    return storage[..., :cols]


def sum_partials(partials: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Second stage of a two-stage reduction: the per-program fp32 partial rows summed."""
    return partials.sum(0).to(dtype)


def dtype_of(t: torch.Tensor | None) -> torch.dtype | None:
    return None if t is None else t.dtype


def chunk_tokens(n_tokens: int, hidden: int, vocab: int, bytes_per_logit: int = 4) -> int:
    """Tokens per chunk of the fused linear losses whose chunk buffers cost ``bytes_per_logit``
    bytes per logit. With a memory budget set (`liger_core.memory_budget`: a call, a module or
    LIGER_FLCE_MEMORY_BUDGET), as many as fit it, a multiple of FUSED_LINEAR_ROW_MULTIPLE when that
    fits; else (FUSED_LINEAR_MEMORY_BUDGET is None) the chunk's logits about as many elements as
    the whole input, a power of two. At least one token, never more than there are."""
    budget = current_memory_budget(hardware.FUSED_LINEAR_MEMORY_BUDGET)
    if budget is not None:
        return chunk_rows(n_tokens, max(vocab, 1) * bytes_per_logit, budget, hardware.FUSED_LINEAR_ROW_MULTIPLE)
    return max(1, min(n_tokens, triton.next_power_of_2(triton.cdiv(n_tokens, triton.cdiv(vocab, max(hidden, 1))))))
