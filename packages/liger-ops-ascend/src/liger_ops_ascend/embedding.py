"""Embedding lookup (``nn.Embedding``) for Ascend NPUs: Triton kernels, tile plans, launch and
autograd Function.

Forward gathers rows: the work is (looked-up position, BLOCK_N columns) units, one program per
vector core walking the units ``pid, pid + programs, ...`` (the grid stays below Ascend's
limit); each unit copies one BLOCK_N piece of a table row into the output.

Backward writes every element of ``grad_weight`` exactly once, with no zero fill before it, no
atomics and no host sync. The positions are sorted by the row they looked up (a stable sort on
the device, so each row's positions keep their order: the sums are deterministic), and
``torch.searchsorted`` of every table row in the sorted indices gives row r's segment
``order[starts[r]:starts[r + 1]]``. The work covers ALL table rows: (BLOCK_M table rows,
BLOCK_N columns) units walked by one program per vector core (the grid and the units depend on
the shapes only). Each unit adds its rows' segments in fp32 (row by row, one incoming gradient
row a step, a contiguous DMA) and stores the BLOCK_M x BLOCK_N tile once: the sums, zeros for
rows nobody looked up and for ``padding_idx``. Most units have no position at all (two scalar
loads tell) and only store a tile of zeros; several rows a tile where grad_weight's rows are
32-byte aligned.

No host sync: sort, arange and searchsorted produce tensors whose sizes are the indices' and the
table's shapes, and the kernel reads the segment bounds on the device; nothing calls
``.item()``, ``unique`` or a data-sized allocation.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.ops.embedding import check_args

from liger_ops_ascend import hardware
from liger_ops_ascend._jit import flat_indices, tile_indices, tile_ptrs
from liger_ops_ascend._tiling import dma, elem_bytes, f32_copy, mask, once, work
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
def _embedding_backward_kernel(
    DY, ORDER, STARTS, DW, n_units, n_col_blocks, n_rows, n_cols, dy_row_stride, dw_row_stride, padding_idx,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    pid, num_programs, m_idx, n_idx = tile_indices(BLOCK_M, BLOCK_N)
    for unit_i in range(pid, n_units, num_programs):
        unit = (pid * 0 + unit_i).to(tl.int64)
        row0 = (unit // n_col_blocks) * BLOCK_M
        cols = (unit % n_col_blocks) * BLOCK_N + n_idx
        col_mask = cols < n_cols
        block_rows = tl.minimum(n_rows - row0, BLOCK_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        # Row r's positions are ORDER[STARTS[r]:STARTS[r + 1]], so the tile's rows have
        # STARTS[row0 + block_rows] - STARTS[row0] positions in all: most tiles have none and
        # only store zeros.
        if tl.load(STARTS + row0 + block_rows) > tl.load(STARTS + row0):
            for m in range(BLOCK_M):
                row = row0 + m
                if m < block_rows:
                    start = tl.load(STARTS + row)
                    end = tl.load(STARTS + row + 1)
                    if (end > start) & (row != padding_idx):
                        row_sum = tl.zeros((BLOCK_N,), dtype=tl.float32)
                        for i in range(start, end):
                            p = tl.load(ORDER + i).to(tl.int64)
                            row_sum += tl.load(DY + p * dy_row_stride + cols, mask=col_mask, other=0.0).to(tl.float32)
                        # Row m of the tile, selected by an fp32 compare (no int vector compare).
                        acc += tl.where(m_idx.to(tl.float32)[:, None] == m, row_sum[None, :], 0.0)
        tile_mask = (m_idx < block_rows)[:, None] & col_mask[None, :]
        tl.store(tile_ptrs(DW, row0, m_idx, dw_row_stride, cols), acc.to(DW.dtype.element_ty), mask=tile_mask)


@dataclass(frozen=True)
class EmbeddingPlan:
    block_m: int
    block_n: int
    n_col_blocks: int
    kernel: KernelPlan


def _backward_tiles(m: int, n: int, wb: int, db: int) -> tuple[Tile, ...]:
    # One incoming gradient row at a time (its fp32 copy and the row's sum), the tile's fp32
    # sums and the selected row added to them, the tile stored in weight's dtype.
    return (
        *dma("dy", 1, n, db),
        *f32_copy("dy", 1, n, db),
        *once("row_sum", 1, n, 4),
        *once("acc", m, n, 4),
        *work("f32_", m, n, 1),
        *dma("dw", m, n, wb),
        *mask(m, n),
    )


@functools.lru_cache(maxsize=256)
def _plan(direction: str, n_units_rows: int, n_cols: int, wb: int, db: int, hw: hardware.Hardware) -> EmbeddingPlan:
    block_n = max(
        hardware.min_block(min(wb, db or wb)), min(hardware.EMBEDDING_BLOCK_N, triton.next_power_of_2(n_cols))
    )
    n_col_blocks = triton.cdiv(n_cols, block_n)
    if direction == "forward":
        # A piece of a table row loaded and stored as is (no fp32 copy).
        tiles = (*dma("w", 1, block_n, wb), *dma("y", 1, block_n, wb), *mask(1, block_n))
        programs = max(1, min(hw.vector_cores, n_units_rows * n_col_blocks))
        return EmbeddingPlan(1, block_n, n_col_blocks, KernelPlan("embedding_forward", (programs,), tiles))
    # Several table rows per tile where grad_weight's rows are 32-byte aligned: the stores of the
    # (mostly zero) tiles are the whole pass, wider is better, up to the tile and UB caps.
    block_m, pitch = 1, n_cols * wb
    span = block_n * n_col_blocks
    while (
        pitch % hardware.ALIGN_BYTES == 0
        and block_m * 2 * block_n <= hardware.EMBEDDING_BACKWARD_TILE_ELEMENTS
        and block_m * 2 <= hardware.MAX_BLOCK_M
        and (2 * block_m - 1) * n_cols + span <= hardware.INT32_MAX
        and sum(t.nbytes for t in _backward_tiles(block_m * 2, block_n, wb, db)) <= hw.ub_budget
    ):
        block_m *= 2
    programs = max(1, min(hw.vector_cores, triton.cdiv(n_units_rows, block_m) * n_col_blocks))
    kernel = KernelPlan(
        "embedding_backward", (programs,), _backward_tiles(block_m, block_n, wb, db), block_m, (pitch,),
        (block_m - 1) * n_cols + span,
    )  # fmt: skip
    return EmbeddingPlan(block_m, block_n, n_col_blocks, kernel)


def plan_embedding(direction: str, n_rows: int, n_cols: int, w_dtype, dy_dtype, hw: hardware.Hardware) -> EmbeddingPlan:
    """The tile plan over ``n_rows`` rows of ``n_cols`` columns: looked-up positions forward
    (one row a tile), the whole table backward (``block_m`` table rows a tile)."""
    return _plan(direction, n_rows, n_cols, elem_bytes(w_dtype), elem_bytes(dy_dtype), hw)


def embedding_forward(weight: torch.Tensor, idx: torch.Tensor, hw: hardware.Hardware) -> torch.Tensor:
    """``weight[idx]`` for flat ``idx``, as ``(len(idx), embedding_dim)`` rows."""
    n_idx, n_cols = idx.numel(), weight.shape[1]
    y = torch.empty((n_idx, n_cols), dtype=weight.dtype, device=weight.device)
    if n_idx == 0 or n_cols == 0:
        return y
    if weight.stride(1) != 1:
        weight = weight.contiguous()
    p = plan_embedding("forward", n_idx, n_cols, weight.dtype, None, hw)
    launch(
        _embedding_forward_kernel, p.kernel, hw,
        weight, idx, y, n_idx * p.n_col_blocks, p.n_col_blocks, n_cols, weight.stride(0), BLOCK_N=p.block_n,
    )  # fmt: skip
    return y


def row_segments(idx: torch.Tensor, num_embeddings: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(order, starts)``: the positions sorted by the row they looked up (stable, so each row's
    positions keep their order), and for every table row ``r`` where its positions are,
    ``order[starts[r]:starts[r + 1]]`` (empty for a row nobody looked up). Device-side: sizes
    depend on the shapes only, no value is read on the host."""
    sorted_idx, order = torch.sort(idx, stable=True)
    table_rows = torch.arange(num_embeddings + 1, dtype=sorted_idx.dtype, device=idx.device)
    return order, torch.searchsorted(sorted_idx, table_rows)


def embedding_backward(
    dy: torch.Tensor,
    idx: torch.Tensor,
    num_embeddings: int,
    dtype: torch.dtype,
    padding_idx: int | None,
    hw: hardware.Hardware,
) -> torch.Tensor:
    """``grad_weight`` from the incoming gradient rows ``dy`` of the flat positions ``idx``:
    every element written once, by the kernel (no zero fill first)."""
    n_cols = dy.shape[1]
    if idx.numel() == 0:
        return torch.zeros((num_embeddings, n_cols), dtype=dtype, device=dy.device)
    dw = torch.empty((num_embeddings, n_cols), dtype=dtype, device=dy.device)
    if num_embeddings == 0 or n_cols == 0:
        return dw
    if dy.stride(1) != 1:
        dy = dy.contiguous()
    order, starts = row_segments(idx, num_embeddings)
    p = plan_embedding("backward", num_embeddings, n_cols, dtype, dy.dtype, hw)
    padding = -1 if padding_idx is None else padding_idx % num_embeddings
    # Every table row, whatever the indices' values: the work depends on the shapes alone.
    n_units = triton.cdiv(num_embeddings, p.block_m) * p.n_col_blocks
    launch(
        _embedding_backward_kernel, p.kernel, hw,
        dy, order, starts, dw, n_units, p.n_col_blocks, num_embeddings, n_cols, dy.stride(0), dw.stride(0), padding,
        BLOCK_M=p.block_m, BLOCK_N=p.block_n,
    )  # fmt: skip
    return dw


@implements("embedding")
class LigerEmbeddingFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight, indices, padding_idx):
        check_args(weight, indices, padding_idx)
        hw = hardware.current(weight.device)
        idx = indices.reshape(-1)
        ctx.save_for_backward(idx)
        ctx.table, ctx.padding_idx, ctx.hw = (weight.shape[0], weight.dtype), padding_idx, hw
        return embedding_forward(weight, idx, hw).view(*indices.shape, weight.shape[1])

    @staticmethod
    def backward(ctx, dy):
        (idx,) = ctx.saved_tensors
        num_embeddings, dtype = ctx.table
        dy_rows = dy.reshape(idx.numel(), dy.shape[-1])
        return embedding_backward(dy_rows, idx, num_embeddings, dtype, ctx.padding_idx, ctx.hw), None, None
