"""Embedding lookup (``nn.Embedding``) for Ascend NPUs: Triton kernels, tile plans, launch and
the kernel adapter of `liger_core.drivers.embedding`.

Forward gathers rows: the work is (looked-up position, BLOCK_N columns) units, one program per
vector core walking the units ``pid, pid + programs, ...`` (the grid stays below Ascend's
limit); each unit copies one BLOCK_N piece of a table row into the output.

Backward writes every element of ``grad_weight`` exactly once (no zero fill before it), with no
atomics and no host sync, in two kernels whose grids and work depend on the shapes alone. A flag
per table row marks the rows looked up (``index_fill_`` on the device). The zero-fill kernel
walks (BLOCK_M table rows, BLOCK_N columns) units, one program per vector core, and stores its
tile of zeros to the rows nobody looked up and to ``padding_idx`` (a row mask from the flags;
several rows a tile where grad_weight's rows are 32-byte aligned). The segment-sum kernel walks
(sorted position, BLOCK_N columns) units of the stably sorted indices: the first position of
each run of equal rows (not ``padding_idx``) adds the run's incoming gradient rows in fp32, in
their original order (deterministic), and stores the row once. The run is walked with a
``while`` loop: its end is found on the device. The indices are sorted as int32 when the table
allows (`liger_core.drivers.embedding.sorted_positions`, as on CUDA; CANN's aclnnSort sorts int32
keys stably, and the segment sums then read int32 rows, which keeps them out of the int64 vector
path; the sort's time on an NPU is not measured).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import embedding as embedding_driver

from liger_ops_ascend import hardware
from liger_ops_ascend._jit import flat_indices, tile_indices, tile_ptrs
from liger_ops_ascend._tiling import dma, elem_bytes, f32_copy, mask, once
from liger_ops_ascend.launch import KernelPlan, Tile, launch


@triton.jit
def _embedding_forward_kernel(W, IDX, Y, n_units, n_col_blocks, n_cols, w_row_stride, BLOCK_N: tl.constexpr):
    pid, num_programs, idx = flat_indices(BLOCK_N)
    for unit_i in range(pid, n_units, num_programs):
        unit = (pid * 0 + unit_i).to(tl.int64)
        pos = unit // n_col_blocks
        cols = (unit % n_col_blocks) * BLOCK_N + idx
        col_mask = cols < n_cols
        row = tl.load(IDX + pos).to(tl.int64)
        values = tl.load(W + row * w_row_stride + cols, mask=col_mask)
        tl.store(Y + pos * n_cols + cols, values, mask=col_mask)


@triton.jit
def _embedding_zero_unused_rows_kernel(
    LOOKED_UP, DW, n_units, n_col_blocks, n_rows, n_cols, dw_row_stride, padding_idx,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    zeros = tl.zeros((BLOCK_M, BLOCK_N), dtype=DW.dtype.element_ty)
    for unit_i in range(pid, n_units, num_programs):
        unit = (pid * 0 + unit_i).to(tl.int64)
        row0 = (unit // n_col_blocks) * BLOCK_M
        cols = (unit % n_col_blocks) * BLOCK_N + n_idx
        row_mask = m_idx < tl.minimum(n_rows - row0, BLOCK_M).to(tl.int32)
        looked_up = tl.load(LOOKED_UP + row0 + m_idx, mask=row_mask, other=1)
        # The padding row as a tile index (int32: the offset stays out of the int64 vector unit).
        unused = (looked_up == 0) | (m_idx == (padding_idx - row0).to(tl.int32))
        tile_mask = (row_mask & unused)[:, None] & (cols < n_cols)[None, :]
        tl.store(tile_ptrs(DW, row0, m_idx, dw_row_stride, cols), zeros, mask=tile_mask)


@triton.jit
def _embedding_segment_sums_kernel(
    DY, SORTED_IDX, ORDER, DW, n_units, n_col_blocks, n_idx, n_cols, dy_row_stride, dw_row_stride, padding_idx,
    BLOCK_N: tl.constexpr,
):  # fmt: skip
    pid, num_programs, idx = flat_indices(BLOCK_N)
    for unit_i in range(pid, n_units, num_programs):
        unit = (pid * 0 + unit_i).to(tl.int64)
        i = unit // n_col_blocks
        cols = (unit % n_col_blocks) * BLOCK_N + idx
        col_mask = cols < n_cols
        row = tl.load(SORTED_IDX + i)
        prev = tl.load(SORTED_IDX + tl.maximum(i - 1, 0))
        # Only the first position of a run writes the row (the others store nothing).
        if ((i == 0) | (row != prev)) & (row != padding_idx):
            acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
            j = i
            in_run = i < n_idx
            while in_run:
                pos = tl.load(ORDER + j).to(tl.int64)
                acc += tl.load(DY + pos * dy_row_stride + cols, mask=col_mask, other=0.0).to(tl.float32)
                j += 1
                # The clamped load stays in bounds; past the end the run stops anyway.
                in_run = (j < n_idx) & (tl.load(SORTED_IDX + tl.minimum(j, n_idx - 1)) == row)
            tl.store(DW + row.to(tl.int64) * dw_row_stride + cols, acc.to(DW.dtype.element_ty), mask=col_mask)


@dataclass(frozen=True)
class EmbeddingPlan:
    block_m: int
    block_n: int
    n_col_blocks: int
    kernel: KernelPlan
    # Backward only: the segment sums' launch (one sorted position x block_n columns a unit).
    segments: KernelPlan | None = None


def _zero_tiles(m: int, n: int, wb: int) -> tuple[Tile, ...]:
    # The tile of zeros (made once, stored for every unit), the units' looked-up flags (int8)
    # and the tile's mask.
    return (*once("zeros", m, n, wb), *dma("looked_up", 1, m, 1), *mask(m, n))


def _segment_tiles(n: int, wb: int, db: int) -> tuple[Tile, ...]:
    # One incoming gradient row at a time (its fp32 copy), the run's fp32 sum, the row stored in
    # weight's dtype.
    return (
        *dma("dy", 1, n, db), *f32_copy("dy", 1, n, db), *once("acc", 1, n, 4), *dma("dw", 1, n, wb), *mask(1, n),
    )  # fmt: skip


@functools.lru_cache(maxsize=256)
def _plan(
    direction: str, n_units_rows: int, n_cols: int, wb: int, db: int, n_positions: int, hw: hardware.Hardware
) -> EmbeddingPlan:
    block_n = max(
        hardware.min_block(min(wb, db or wb)), min(hardware.EMBEDDING_BLOCK_N, triton.next_power_of_2(n_cols))
    )
    n_col_blocks = triton.cdiv(n_cols, block_n)
    if direction == "forward":
        # A piece of a table row loaded and stored as is (no fp32 copy).
        tiles = (*dma("w", 1, block_n, wb), *dma("y", 1, block_n, wb), *mask(1, block_n))
        programs = max(1, min(hw.vector_cores, n_units_rows * n_col_blocks))
        return EmbeddingPlan(1, block_n, n_col_blocks, KernelPlan("embedding_forward", (programs,), tiles))
    # Several table rows per zero tile where grad_weight's rows are 32-byte aligned: its stores
    # are most of the pass, wider is better, up to the tile and UB caps.
    block_m, pitch = 1, n_cols * wb
    span = block_n * n_col_blocks
    while (
        pitch % hardware.ALIGN_BYTES == 0
        and block_m * 2 * block_n <= hardware.EMBEDDING_ZERO_TILE_ELEMENTS
        and block_m * 2 <= hardware.MAX_BLOCK_M
        and (2 * block_m - 1) * n_cols + span <= hardware.INT32_MAX
        and sum(t.nbytes for t in _zero_tiles(block_m * 2, block_n, wb)) <= hw.ub_budget
    ):
        block_m *= 2
    programs = max(1, min(hw.vector_cores, triton.cdiv(n_units_rows, block_m) * n_col_blocks))
    zero_rows = KernelPlan(
        "embedding_zero_unused_rows", (programs,), _zero_tiles(block_m, block_n, wb), block_m, (pitch,),
        (block_m - 1) * n_cols + span,
    )  # fmt: skip
    programs = max(1, min(hw.vector_cores, n_positions * n_col_blocks))
    segments = KernelPlan("embedding_segment_sums", (programs,), _segment_tiles(block_n, wb, db))
    return EmbeddingPlan(block_m, block_n, n_col_blocks, zero_rows, segments)


def plan_embedding(
    direction: str, n_rows: int, n_cols: int, w_dtype, dy_dtype, hw: hardware.Hardware, n_positions: int = 0
) -> EmbeddingPlan:
    """The tile plan over ``n_rows`` rows of ``n_cols`` columns: looked-up positions forward
    (one row a tile), the whole table backward (``block_m`` table rows a zero tile; the segment
    sums over ``n_positions`` sorted positions, one row a unit)."""
    return _plan(direction, n_rows, n_cols, elem_bytes(w_dtype), elem_bytes(dy_dtype), n_positions, hw)


def embedding_forward(weight: torch.Tensor, idx: torch.Tensor, hw: hardware.Hardware) -> torch.Tensor:
    """``weight[idx]`` for flat ``idx``, as ``(len(idx), embedding_dim)`` rows (``weight``'s columns unit-stride)."""
    n_idx, n_cols = idx.numel(), weight.shape[1]
    y = torch.empty((n_idx, n_cols), dtype=weight.dtype, device=weight.device)
    if n_idx == 0 or n_cols == 0:
        return y
    p = plan_embedding("forward", n_idx, n_cols, weight.dtype, None, hw)
    launch(
        _embedding_forward_kernel, p.kernel, hw,
        weight, idx, y, n_idx * p.n_col_blocks, p.n_col_blocks, n_cols, weight.stride(0), BLOCK_N=p.block_n,
    )  # fmt: skip
    return y


def embedding_backward(
    dy: torch.Tensor,
    idx: torch.Tensor,
    num_embeddings: int,
    dtype: torch.dtype,
    padding_idx: int | None,
    hw: hardware.Hardware,
) -> torch.Tensor:
    """``grad_weight`` from the incoming gradient rows ``dy`` (columns unit-stride) of the flat
    positions ``idx``: every element written once, by the two kernels (no zero fill first)."""
    n_idx, n_cols = idx.numel(), dy.shape[1]
    if n_idx == 0:
        return torch.zeros((num_embeddings, n_cols), dtype=dtype, device=dy.device)
    dw = torch.empty((num_embeddings, n_cols), dtype=dtype, device=dy.device)
    if num_embeddings == 0 or n_cols == 0:
        return dw
    p = plan_embedding("backward", num_embeddings, n_cols, dtype, dy.dtype, hw, n_idx)
    padding = -1 if padding_idx is None else padding_idx % num_embeddings
    # Every table row and every position, whatever the indices' values: work from shapes alone.
    launch(
        _embedding_zero_unused_rows_kernel, p.kernel, hw,
        embedding_driver.looked_up_rows(idx, num_embeddings), dw, triton.cdiv(num_embeddings, p.block_m) * p.n_col_blocks,
        p.n_col_blocks, num_embeddings, n_cols, dw.stride(0), padding, BLOCK_M=p.block_m, BLOCK_N=p.block_n,
    )  # fmt: skip
    sorted_idx, order = embedding_driver.sorted_positions(idx, num_embeddings)
    launch(
        _embedding_segment_sums_kernel, p.segments, hw,
        dy, sorted_idx, order, dw, n_idx * p.n_col_blocks, p.n_col_blocks, n_idx, n_cols, dy.stride(0), dw.stride(0),
        padding, BLOCK_N=p.block_n,
    )  # fmt: skip
    return dw


class EmbeddingKernels:
    """`liger_core.drivers.embedding.EmbeddingKernels` on this module's kernels (the hardware facts
    of the tensors' device, `hardware.current`, for each launch plan)."""

    protocol = embedding_driver.PROTOCOL

    @staticmethod
    def forward(weight: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return embedding_forward(weight, idx, hardware.current(weight.device))

    @staticmethod
    def backward(
        dy: torch.Tensor, idx: torch.Tensor, num_embeddings: int, dtype: torch.dtype, padding_idx: int | None
    ) -> torch.Tensor:
        return embedding_backward(dy, idx, num_embeddings, dtype, padding_idx, hardware.current(dy.device))


LigerEmbeddingFunction = implements("embedding")(embedding_driver.autograd_function(EmbeddingKernels(), __name__))
