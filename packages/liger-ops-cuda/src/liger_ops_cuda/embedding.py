"""Embedding lookup (``nn.Embedding``) for NVIDIA GPUs: Triton kernels, launch and
the kernel adapter of `liger_core.drivers.embedding`.

Forward gathers rows: each program copies BLOCK_M looked-up rows x BLOCK_N columns of the table
into the output (memory-bound, exact copies).

Backward writes every element of ``grad_weight`` exactly once (no zero fill before it), with no
atomics and no host sync, in two kernels whose grids depend on the shapes alone (CUDA graphs capture them).
A flag per table row marks the rows looked up (``index_fill_`` on the device). The zero-fill
kernel stores zeros to the rows nobody looked up and to ``padding_idx`` (row tiles, a row mask
from the flags). The segment-sum kernel runs one program per position of the stably sorted
indices: the first position of each run of equal rows (not ``padding_idx``) adds the run's
incoming gradient rows in fp32, in their original order (deterministic), and stores the row
once. The run is walked with a ``while`` loop: its end is found on the device. The indices are
sorted as int32 when the table allows: the radix sort's passes scale with the key's width
(16384 indices on an H200: 76 us as int64, 47 us as int32).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.drivers import embedding as embedding_driver
from liger_ops_cuda import hardware


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
def _embedding_zero_unused_rows_kernel(
    LOOKED_UP, DW, n_rows, n_cols, dw_row_stride, padding_idx, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):  # fmt: skip
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < n_rows
    looked_up = tl.load(LOOKED_UP + rows, mask=row_mask, other=1)
    unused = (looked_up == 0) | (rows == padding_idx)
    mask = (row_mask & unused)[:, None] & (cols < n_cols)[None, :]
    zeros = tl.zeros((BLOCK_M, BLOCK_N), dtype=DW.dtype.element_ty)
    tl.store(DW + rows[:, None] * dw_row_stride + cols[None, :], zeros, mask=mask)


@triton.jit
def _embedding_segment_sums_kernel(
    DY, SORTED_IDX, ORDER, DW, n_idx, n_cols, dy_row_stride, dw_row_stride, padding_idx, BLOCK_N: tl.constexpr
):  # fmt: skip
    i = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
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


def embedding_forward(weight: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``weight[idx]`` for flat ``idx``, as ``(len(idx), embedding_dim)`` rows (``weight``'s columns unit-stride)."""
    n_idx, n_cols = idx.numel(), weight.shape[1]
    y = torch.empty((n_idx, n_cols), dtype=weight.dtype, device=weight.device)
    if n_idx == 0 or n_cols == 0:
        return y
    block_m, block_n = hardware.EMBEDDING_BLOCK_M, min(hardware.EMBEDDING_BLOCK_N, triton.next_power_of_2(n_cols))
    grid = (triton.cdiv(n_idx, block_m), triton.cdiv(n_cols, block_n))
    _embedding_forward_kernel[grid](
        weight, idx, y, n_idx, n_cols, weight.stride(0), BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=hardware.EMBEDDING_NUM_WARPS,
    )  # fmt: skip
    return y


def plan_zero_rows(n_cols: int) -> tuple[int, int]:
    """``(block_m, block_n)``: table rows x columns per zero-fill tile, about
    ``EMBEDDING_ZERO_TILE_ELEMENTS`` (whole rows up to ``EMBEDDING_ZERO_BLOCK_N`` wide, more rows
    when the rows are narrow)."""
    block_n = min(hardware.EMBEDDING_ZERO_BLOCK_N, triton.next_power_of_2(n_cols))
    block_m = min(hardware.EMBEDDING_ZERO_MAX_BLOCK_M, max(1, hardware.EMBEDDING_ZERO_TILE_ELEMENTS // block_n))
    return block_m, block_n


def plan_segment_sums(n_cols: int) -> int:
    """``block_n``: the columns of one table row a segment-sum program adds."""
    return min(hardware.EMBEDDING_SEGMENT_BLOCK_N, triton.next_power_of_2(n_cols))


def embedding_backward(
    dy: torch.Tensor, idx: torch.Tensor, num_embeddings: int, dtype: torch.dtype, padding_idx: int | None
) -> torch.Tensor:
    """``grad_weight`` from the incoming gradient rows ``dy`` (columns unit-stride) of the flat
    positions ``idx``: every element written once, by the two kernels (no zero fill first)."""
    n_idx, n_cols = idx.numel(), dy.shape[1]
    if n_idx == 0:
        return torch.zeros((num_embeddings, n_cols), dtype=dtype, device=dy.device)
    dw = torch.empty((num_embeddings, n_cols), dtype=dtype, device=dy.device)
    if num_embeddings == 0 or n_cols == 0:
        return dw
    padding = -1 if padding_idx is None else padding_idx % num_embeddings
    block_m, block_n = plan_zero_rows(n_cols)
    # Every table row and every position, whatever the indices' values: grids from shapes alone.
    _embedding_zero_unused_rows_kernel[(triton.cdiv(num_embeddings, block_m), triton.cdiv(n_cols, block_n))](
        embedding_driver.looked_up_rows(idx, num_embeddings), dw, num_embeddings, n_cols, dw.stride(0), padding,
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=hardware.EMBEDDING_ZERO_NUM_WARPS,
    )  # fmt: skip
    sorted_idx, order = embedding_driver.sorted_positions(idx, num_embeddings)
    block_n = plan_segment_sums(n_cols)
    _embedding_segment_sums_kernel[(n_idx, triton.cdiv(n_cols, block_n))](
        dy, sorted_idx, order, dw, n_idx, n_cols, dy.stride(0), dw.stride(0), padding,
        BLOCK_N=block_n, num_warps=hardware.EMBEDDING_SEGMENT_NUM_WARPS,
    )  # fmt: skip
    return dw


class EmbeddingKernels:
    """`liger_core.drivers.embedding.EmbeddingKernels` on this module's kernels."""

    protocol = embedding_driver.PROTOCOL
    forward = staticmethod(embedding_forward)
    backward = staticmethod(embedding_backward)


LigerEmbeddingFunction = implements("embedding")(embedding_driver.autograd_function(EmbeddingKernels(), __name__))
