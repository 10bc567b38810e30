"""Embedding lookup (``nn.Embedding``) for Ascend NPUs: Triton kernels, tile plans, launch and
autograd Function.

Forward gathers rows: the work is (looked-up position, BLOCK_N columns) units, one program per
vector core walking the units ``pid, pid + programs, ...`` (the grid stays below Ascend's
limit); each unit copies one BLOCK_N piece of a table row into the output. Backward is a
deterministic segmented sum (no atomics): the positions are sorted by the row they looked up
(stable), and each (looked-up row, BLOCK_N columns) unit adds that row's incoming gradient rows
in fp32 and writes the sum once. Rows nobody looked up, and ``padding_idx``, keep the zeros the
gradient starts from. One table row per tile: no multi-row alignment to meet.
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
from liger_ops_ascend._jit import flat_indices
from liger_ops_ascend._tiling import dma, elem_bytes, mask, once, work
from liger_ops_ascend.launch import KernelPlan, launch


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
    DY,
    ORDER,
    ROWS,
    STARTS,
    COUNTS,
    DW,
    n_units,
    n_col_blocks,
    n_cols,
    dy_row_stride,
    dw_row_stride,
    padding_idx,
    BLOCK_N: tl.constexpr,
):
    pid, num_programs, idx = flat_indices(BLOCK_N)
    for unit_i in range(pid, n_units, num_programs):
        unit = (pid * 0 + unit_i).to(tl.int64)
        segment = unit // n_col_blocks
        cols = (unit % n_col_blocks) * BLOCK_N + idx
        col_mask = cols < n_cols
        row = tl.load(ROWS + segment).to(tl.int64)
        if row != padding_idx:
            start = tl.load(STARTS + segment)
            count = tl.load(COUNTS + segment)
            acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
            for i in range(start, start + count):
                p = tl.load(ORDER + i).to(tl.int64)
                acc += tl.load(DY + p * dy_row_stride + cols, mask=col_mask, other=0.0).to(tl.float32)
            tl.store(DW + row * dw_row_stride + cols, acc.to(DW.dtype.element_ty), mask=col_mask)


@dataclass(frozen=True)
class EmbeddingPlan:
    block_n: int
    n_col_blocks: int
    kernel: KernelPlan


@functools.lru_cache(maxsize=256)
def _plan(direction: str, n_units_rows: int, n_cols: int, wb: int, db: int, hw: hardware.Hardware) -> EmbeddingPlan:
    block_n = max(
        hardware.min_block(min(wb, db or wb)), min(hardware.EMBEDDING_BLOCK_N, triton.next_power_of_2(n_cols))
    )
    n_col_blocks = triton.cdiv(n_cols, block_n)
    if direction == "forward":
        # A piece of a table row loaded and stored as is (no fp32 copy).
        tiles = (*dma("w", 1, block_n, wb), *dma("y", 1, block_n, wb), *mask(1, block_n))
    else:
        tiles = (
            *dma("dy", 1, block_n, db),
            *once("acc", 1, block_n, 4),
            *work("f32_", 1, block_n, 1),
            *dma("dw", 1, block_n, wb),
            *mask(1, block_n),
        )
    programs = max(1, min(hw.vector_cores, n_units_rows * n_col_blocks))
    return EmbeddingPlan(block_n, n_col_blocks, KernelPlan(f"embedding_{direction}", (programs,), tiles))


def plan_embedding(direction: str, n_rows: int, n_cols: int, w_dtype, dy_dtype, hw: hardware.Hardware) -> EmbeddingPlan:
    """The tile plan of ``n_rows`` units of rows (looked-up positions forward, distinct rows
    backward) of ``n_cols`` columns."""
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


def looked_up_segments(idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(order, rows, starts, counts)``: the positions sorted by the row they looked up (stable),
    each distinct row, where its positions start in ``order`` and how many there are."""
    sorted_idx, order = torch.sort(idx, stable=True)
    rows, counts = torch.unique_consecutive(sorted_idx, return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    return order, rows, starts, counts


def embedding_backward(
    dy: torch.Tensor,
    idx: torch.Tensor,
    num_embeddings: int,
    dtype: torch.dtype,
    padding_idx: int | None,
    hw: hardware.Hardware,
) -> torch.Tensor:
    """``grad_weight`` from the incoming gradient rows ``dy`` of the flat positions ``idx``."""
    n_cols = dy.shape[1]
    dw = torch.zeros((num_embeddings, n_cols), dtype=dtype, device=dy.device)
    if idx.numel() == 0 or n_cols == 0:
        return dw
    if dy.stride(1) != 1:
        dy = dy.contiguous()
    order, rows, starts, counts = looked_up_segments(idx)
    p = plan_embedding("backward", rows.numel(), n_cols, dtype, dy.dtype, hw)
    padding = -1 if padding_idx is None else padding_idx % num_embeddings
    launch(
        _embedding_backward_kernel, p.kernel, hw,
        dy, order, rows, starts, counts, dw, rows.numel() * p.n_col_blocks, p.n_col_blocks, n_cols,
        dy.stride(0), dw.stride(0), padding, BLOCK_N=p.block_n,
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
