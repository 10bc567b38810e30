"""Embedding lookup (``nn.Embedding``) for NVIDIA GPUs: Triton kernels, launch and autograd Function.

Forward gathers rows: each program copies BLOCK_M looked-up rows x BLOCK_N columns of the table
into the output (memory-bound, exact copies). Backward is a deterministic segmented sum (no
atomics): the positions are sorted by the row they looked up (a stable sort, so each row's
positions keep their order), and one program per (looked-up row, BLOCK_N columns) adds that
row's incoming gradient rows in fp32 and writes the sum once. Rows nobody looked up, and
``padding_idx``, keep the zeros the gradient starts from.

The segment walk is a ``while`` loop: its bounds are values loaded from memory, and a ``range``
over them makes the interpreter convert an array to an int (an error from NumPy 2.4).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.ops.embedding import check_args
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
def _embedding_backward_kernel(
    DY, ORDER, ROWS, STARTS, COUNTS, DW, n_cols, dy_row_stride, dw_row_stride, padding_idx, BLOCK_N: tl.constexpr
):
    segment = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    row = tl.load(ROWS + segment).to(tl.int64)
    if row != padding_idx:
        i = tl.load(STARTS + segment).to(tl.int64)
        end = i + tl.load(COUNTS + segment).to(tl.int64)
        acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        while i < end:
            pos = tl.load(ORDER + i).to(tl.int64)
            acc += tl.load(DY + pos * dy_row_stride + cols, mask=col_mask, other=0.0).to(tl.float32)
            i += 1
        tl.store(DW + row * dw_row_stride + cols, acc.to(DW.dtype.element_ty), mask=col_mask)


def embedding_forward(weight: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``weight[idx]`` for flat ``idx``, as ``(len(idx), embedding_dim)`` rows."""
    n_idx, n_cols = idx.numel(), weight.shape[1]
    y = torch.empty((n_idx, n_cols), dtype=weight.dtype, device=weight.device)
    if n_idx == 0 or n_cols == 0:
        return y
    if weight.stride(1) != 1:
        weight = weight.contiguous()
    block_m, block_n = hardware.EMBEDDING_BLOCK_M, min(hardware.EMBEDDING_BLOCK_N, triton.next_power_of_2(n_cols))
    grid = (triton.cdiv(n_idx, block_m), triton.cdiv(n_cols, block_n))
    _embedding_forward_kernel[grid](
        weight, idx, y, n_idx, n_cols, weight.stride(0), BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=hardware.EMBEDDING_NUM_WARPS,
    )  # fmt: skip
    return y


def looked_up_segments(idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(order, rows, starts, counts)``: the positions sorted by the row they looked up (stable),
    each distinct row, where its positions start in ``order`` and how many there are."""
    sorted_idx, order = torch.sort(idx, stable=True)
    rows, counts = torch.unique_consecutive(sorted_idx, return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    return order, rows, starts, counts


def embedding_backward(
    dy: torch.Tensor, idx: torch.Tensor, num_embeddings: int, dtype: torch.dtype, padding_idx: int | None
) -> torch.Tensor:
    """``grad_weight`` from the incoming gradient rows ``dy`` of the flat positions ``idx``."""
    n_cols = dy.shape[1]
    dw = torch.zeros((num_embeddings, n_cols), dtype=dtype, device=dy.device)
    if idx.numel() == 0 or n_cols == 0:
        return dw
    if dy.stride(1) != 1:
        dy = dy.contiguous()
    order, rows, starts, counts = looked_up_segments(idx)
    block_n = min(hardware.EMBEDDING_BLOCK_N, triton.next_power_of_2(n_cols))
    padding = -1 if padding_idx is None else padding_idx % num_embeddings
    grid = (rows.numel(), triton.cdiv(n_cols, block_n))
    _embedding_backward_kernel[grid](
        dy, order, rows, starts, counts, dw, n_cols, dy.stride(0), dw.stride(0), padding, BLOCK_N=block_n,
        num_warps=hardware.EMBEDDING_NUM_WARPS,
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
