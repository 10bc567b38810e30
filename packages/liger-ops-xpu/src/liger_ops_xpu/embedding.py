"""Embedding lookup (``nn.Embedding``) for Intel GPUs: Triton kernels, launch and autograd Function.

Forward gathers rows: each program copies BLOCK_M looked-up rows x BLOCK_N columns of the table
into the output (memory-bound, exact copies, default register file).

Backward writes every element of ``grad_weight`` exactly once, with no zero fill before it, no
atomics and no host sync. The positions are sorted by the row they looked up (a stable sort on
the device, so each row's positions keep their order: the sums are deterministic), and
``torch.searchsorted`` of every table row in the sorted indices gives row r's segment
``order[starts[r]:starts[r + 1]]``. The kernel's grid covers ALL table rows (row blocks x column
blocks: it depends on the shapes only, so graphs capture it); each program adds the
segments of its BLOCK_M rows in fp32 (row by row, one position's BLOCK_N columns a step: few
registers, so many programs stay resident to hide the loads' latency), and stores the
BLOCK_M x BLOCK_N tile once: the sums, zeros for rows nobody looked up and for ``padding_idx``.
Most rows of a large vocabulary have empty segments, so most programs skip the loop and only
store a tile of zeros (contiguous columns: wide, coalesced stores).

No host sync: sort, arange and searchsorted produce tensors whose sizes are the indices' and the
table's shapes, and the kernel reads the segment bounds on the device (the loop's trip count is
a value loaded there); nothing calls ``.item()``, ``unique`` or a data-sized allocation.

The segment walk is a ``while`` loop: its bounds are values loaded from memory, and a ``range``
over them makes the interpreter convert an array to an int (an error from NumPy 2.4).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.ops.embedding import check_args

from liger_ops_xpu import hardware
from liger_ops_xpu._tiling import elementwise_num_warps


@triton.jit
def _embedding_forward_kernel(W, IDX, Y, n_idx, n_cols, w_row_stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < n_idx
    mask = row_mask[:, None] & (cols < n_cols)[None, :]
    table_rows = tl.load(IDX + rows, mask=row_mask, other=0).to(tl.int64)
    values = tl.load(W + table_rows[:, None] * w_row_stride + cols[None, :], mask=mask)
    tl.store(Y + rows[:, None] * n_cols + cols[None, :], values, mask=mask)


@triton.jit
def _embedding_backward_kernel(
    DY, ORDER, STARTS, DW, n_rows, n_cols, dy_row_stride, dw_row_stride, padding_idx,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    row0 = tl.program_id(0).to(tl.int64) * BLOCK_M
    m_idx = tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    block_rows = tl.minimum(n_rows - row0, BLOCK_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # Row r's positions are ORDER[STARTS[r]:STARTS[r + 1]], so the tile's rows have
    # STARTS[row0 + block_rows] - STARTS[row0] positions in all: most tiles have none and only
    # store zeros.
    if tl.load(STARTS + row0 + block_rows) > tl.load(STARTS + row0):
        for m in range(BLOCK_M):
            row = row0 + m
            if m < block_rows:
                i = tl.load(STARTS + row)
                end = tl.load(STARTS + row + 1)
                if (end > i) & (row != padding_idx):
                    row_sum = tl.zeros((BLOCK_N,), dtype=tl.float32)
                    while i < end:
                        pos = tl.load(ORDER + i).to(tl.int64)
                        row_sum += tl.load(DY + pos * dy_row_stride + cols, mask=col_mask, other=0.0).to(tl.float32)
                        i += 1
                    acc += tl.where(m_idx[:, None] == m, row_sum[None, :], 0.0)
    dw_ptrs = DW + row0 * dw_row_stride + m_idx[:, None] * dw_row_stride + cols[None, :]
    tl.store(dw_ptrs, acc.to(DW.dtype.element_ty), mask=(m_idx < block_rows)[:, None] & col_mask[None, :])


def plan_embedding(n_cols: int) -> tuple[int, int, int]:
    """``(block_m, block_n, num_warps)``: the forward's looked-up rows and columns per tile
    (``EMBEDDING_BLOCK_N`` at most), with sub-groups for a BLOCK_M x BLOCK_N tile."""
    block_n = min(hardware.EMBEDDING_BLOCK_N, triton.next_power_of_2(n_cols))
    block_m = hardware.EMBEDDING_BLOCK_M
    return block_m, block_n, elementwise_num_warps(block_m * block_n)


def plan_embedding_backward(n_cols: int) -> tuple[int, int, int]:
    """``(block_m, block_n, num_warps)``: table rows x columns per backward tile, about
    ``EMBEDDING_BACKWARD_TILE_ELEMENTS`` (more rows when the rows are narrow), with sub-groups
    for the tile."""
    block_n = min(hardware.EMBEDDING_BLOCK_N, triton.next_power_of_2(n_cols))
    block_m = min(hardware.EMBEDDING_BACKWARD_MAX_BLOCK_M, hardware.EMBEDDING_BACKWARD_TILE_ELEMENTS // block_n)
    return block_m, block_n, elementwise_num_warps(block_m * block_n)


def embedding_forward(weight: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``weight[idx]`` for flat ``idx``, as ``(len(idx), embedding_dim)`` rows."""
    n_idx, n_cols = idx.numel(), weight.shape[1]
    y = torch.empty((n_idx, n_cols), dtype=weight.dtype, device=weight.device)
    if n_idx == 0 or n_cols == 0:
        return y
    if weight.stride(1) != 1:
        weight = weight.contiguous()
    block_m, block_n, num_warps = plan_embedding(n_cols)
    grid = (triton.cdiv(n_idx, block_m), triton.cdiv(n_cols, block_n))
    _embedding_forward_kernel[grid](
        weight, idx, y, n_idx, n_cols, weight.stride(0), BLOCK_M=block_m, BLOCK_N=block_n,
        **hardware.launch_kwargs(_embedding_forward_kernel, weight.device, num_warps, register_heavy=False),
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
    dy: torch.Tensor, idx: torch.Tensor, num_embeddings: int, dtype: torch.dtype, padding_idx: int | None
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
    block_m, block_n, num_warps = plan_embedding_backward(n_cols)
    padding = -1 if padding_idx is None else padding_idx % num_embeddings
    # Every table row, whatever the indices' values: the grid depends on the shapes alone.
    grid = (triton.cdiv(num_embeddings, block_m), triton.cdiv(n_cols, block_n))
    _embedding_backward_kernel[grid](
        dy, order, starts, dw, num_embeddings, n_cols, dy.stride(0), dw.stride(0), padding,
        BLOCK_M=block_m, BLOCK_N=block_n,
        **hardware.launch_kwargs(_embedding_backward_kernel, dy.device, num_warps, register_heavy=False),
    )  # fmt: skip
    return dw


@implements("embedding")
class LigerEmbeddingFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight, indices, padding_idx):
        check_args(weight, indices, padding_idx)
        idx = indices.reshape(-1)
        ctx.save_for_backward(idx)
        ctx.table, ctx.padding_idx = (weight.shape[0], weight.dtype), padding_idx
        return embedding_forward(weight, idx).view(*indices.shape, weight.shape[1])

    @staticmethod
    def backward(ctx, dy):
        (idx,) = ctx.saved_tensors
        num_embeddings, dtype = ctx.table
        dw = embedding_backward(dy.reshape(idx.numel(), dy.shape[-1]), idx, num_embeddings, dtype, ctx.padding_idx)
        return dw, None, None
