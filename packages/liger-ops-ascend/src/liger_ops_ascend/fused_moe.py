"""The routed SwiGLU experts of an MoE MLP (``fused_moe``, and GPT-OSS's ``fused_moe_clamped_swiglu``)
for Ascend NPUs: grouped GEMM Triton kernels over the selections sorted by expert, UB plan and
the kernel adapter of `liger_core.drivers.fused_moe`.

The work is the CUDA package's (`liger_core.ops.fused_moe.route` sorts the selections by expert
and cuts tiles of BLOCK_M rows that never span two experts, with no host synchronisation: the
tile count is a device value, which bounds the routed kernels' work loops, and the launch plans
use its upper bound; gate-up GEMM with the SwiGLU
epilogue, down GEMM, a deterministic gather-sum; backward with the SwiGLU backward and the
routing weights' gradient in one epilogue, per-expert weight-gradient GEMMs), shaped for the NPU:

- Every kernel is persistent: one program per AI core (the GEMMs run on the cube units, their
  epilogues on the vector units) or per vector core (the gather-sum), walking its work items
  ``pid, pid + programs, ...``, so no grid reaches the 65536 limit at any token count. The
  routed kernels walk ``n_tiles * n_col_blocks`` items, ``n_tiles`` read from the device.
- Tile sizes come from the UB model (ub_model.md): each kernel's live tiles in its terms, the
  GEMM operands counted as multi-buffered DMA tiles as if staged through the UB (an upper bound:
  on the cube path they go through L1), and the widest column block (then reduction step) that
  fits every kernel is taken, whatever the token count.
- Tiles span several rows, so every row pitch is 32-byte aligned: a tensor whose rows are not is
  copied once into padded rows (`aligned_rows`; never for model shapes, whose widths are
  multiples of 16), and the buffers the op makes are allocated padded. A weight that is the
  transpose of a row-major tensor (Llama 4's experts) is read in place, its columns the lines
  (`expert_weight`), and its gradient is written in that layout.
- The kernels gather nothing: triton-ascend's TritonToUnstructure turns a load of rows picked
  by loaded token ids into scalar accesses (tests/test_compiled_access.py), so torch's
  ``index_select`` copies the token rows (hidden_states forward, the incoming gradient backward)
  and the routing weights into expert order first, and every GEMM reads contiguous sorted rows.
  The gather-sum reads one sorted row per scalar index (a structured row load).
- Offsets inside tiles are int32, with an int64 scalar base per tile.

``fused_moe_clamped_swiglu`` runs on the same kernels (as in the CUDA package): the activation
epilogues take `epilogue_args` (constexpr CLAMPED picks the clamped SwiGLU, ``pair_step`` and
``up_shift`` place the gate and up columns, interleaved or concatenated); the gate-up GEMM adds
its tile's expert's bias row (a scalar expert: no gather), the gather-sum the down bias of each
sorted row's expert (``Routing.expert_of_row``, one row at a loaded index like the row itself);
the biases' gradients are liger-core's shared GEMMs over the routing. The plan counts the bias
tiles and the clamped epilogue's (`plan_moe`), so fused_moe's tiles do not shrink for them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import fused_moe as fused_moe_driver
from liger_core.ops.fused_moe import Routing

from liger_ops_ascend import hardware
from liger_ops_ascend._jit import tile_ptrs
from liger_ops_ascend._tiling import FP32, aligned_rows, dma, f32_copy, mask, once, padded_empty, work
from liger_ops_ascend.launch import AscendLaunchError, KernelPlan, Tile, launch


@triton.jit
def _fused_moe_tile(
    item, n_col_blocks, TILE_EXPERT, TILE_ROW_START, EXPERT_OFFSETS, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    """Work item ``item`` (routed tile, column block): its expert and first row (int64 scalars),
    the in-tile row indices and their mask (rows past the expert's end), the first column."""
    tile = item // n_col_blocks
    col0 = (item % n_col_blocks) * BLOCK_N
    expert = tl.load(TILE_EXPERT + tile)
    row0 = tl.load(TILE_ROW_START + tile)
    m_idx = tl.arange(0, BLOCK_M)
    row_mask = m_idx < tl.load(EXPERT_OFFSETS + expert + 1) - row0
    return expert.to(tl.int64), row0.to(tl.int64), m_idx, row_mask, col0


@triton.jit
def _fused_moe_matmul_tile(
    A_ROWS, row_mask, W_COLS, col_mask, k_dim, w_k_stride,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    """fp32 ``A[rows, :] @ W[:, cols]`` over ``k_dim``: ``A_ROWS`` points at each row's first
    element (BLOCK_M x 1, unit column stride), ``W_COLS`` at each column's (1 x BLOCK_N)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    ks = tl.arange(0, BLOCK_K)
    for k0 in range(0, k_dim, BLOCK_K):
        k_mask = ks < k_dim - k0
        a = tl.load(A_ROWS + k0 + ks[None, :], mask=row_mask[:, None] & k_mask[None, :], other=0.0)
        w_ptrs = W_COLS + k0 * w_k_stride + ks[:, None] * w_k_stride
        w = tl.load(w_ptrs, mask=k_mask[:, None] & col_mask[None, :], other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            w = w.to(tl.float32)
        acc = tl.dot(a, w, acc, input_precision=PRECISION)
    return acc


@triton.jit
def _fused_moe_activation(gate, up, limit, alpha, up_offset, CLAMPED: tl.constexpr):
    """The experts' activation of fp32 gate and up: silu(gate) * up (fused_moe), or CLAMPED
    (fused_moe_clamped_swiglu) min(gate, limit) * sigmoid(alpha * .) * (clamp(up, +-limit) + up_offset).
    The clamps propagate NaN, as torch.clamp (and the NPU then adds no NaN handling: ASC002)."""
    if CLAMPED:
        gate = tl.minimum(gate, limit, propagate_nan=tl.PropagateNan.ALL)
        up = tl.minimum(
            tl.maximum(up, -limit, propagate_nan=tl.PropagateNan.ALL), limit, propagate_nan=tl.PropagateNan.ALL
        )
        act = gate * tl.sigmoid(alpha * gate) * (up + up_offset)
    else:
        act = gate * tl.sigmoid(gate) * up
    return act


@triton.jit
def _fused_moe_activation_backward(gate, up, limit, alpha, up_offset, CLAMPED: tl.constexpr):
    """``(act, d act / d gate, d act / d up)`` at fp32 gate and up (a clamp passes the gradient
    inside its closed range, as torch.clamp; the range tests are fp32 compares: vectorised)."""
    if CLAMPED:
        gate_c = tl.minimum(gate, limit, propagate_nan=tl.PropagateNan.ALL)
        up_c = tl.minimum(
            tl.maximum(up, -limit, propagate_nan=tl.PropagateNan.ALL), limit, propagate_nan=tl.PropagateNan.ALL
        )
        sig = tl.sigmoid(alpha * gate_c)
        glu = gate_c * sig
        up_term = up_c + up_offset
        act = glu * up_term
        d_gate = tl.where(gate <= limit, up_term * sig * (1.0 + alpha * gate_c * (1.0 - sig)), 0.0)
        d_up = tl.where((up >= -limit) & (up <= limit), glu, 0.0)
    else:
        sig = tl.sigmoid(gate)
        silu = gate * sig
        act = silu * up
        d_gate = up * sig * (1.0 + gate * (1.0 - sig))
        d_up = silu
    return act, d_gate, d_up


@triton.jit
def _fused_moe_gate_up_kernel(
    X, W, BIAS, TILE_EXPERT, TILE_ROW_START, EXPERT_OFFSETS, PRE, ACT,
    hidden, intermediate, x_row_stride, w_expert_stride, w_row_stride, w_k_stride, bias_expert_stride,
    pre_row_stride, act_row_stride, N_TILES, n_col_blocks, pair_step, up_shift, limit, alpha, up_offset,
    HAS_BIAS: tl.constexpr, CLAMPED: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    """Per sorted row r (expert e; X holds the token rows in sorted order): gate, up = W[e] @ X[r]
    (+ BIAS[e]) for a block of gate columns j (W's rows j * pair_step, and up_shift further the up
    ones, see `epilogue_args`); stores them (PRE, same columns, for the backward) and the
    activation (ACT). W[e] is (2I, H) with strides (w_row_stride, w_k_stride): either may be the
    unit one (see `expert_weight`). The bias is the tile's expert's: one row, no gather."""
    pid = tl.program_id(0)
    n_idx = tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    # In-tile offsets of the block's gate rows from its first, gate0 (a scalar: int32 products of
    # the index vector stay bounded by the tile).
    gate_rows = n_idx * pair_step
    # The routing's tiles only (the launch is sized for their upper bound).
    n_items = tl.load(N_TILES) * n_col_blocks
    for item in range(pid, n_items, tl.num_programs(0)):
        expert, row0, m_idx, row_mask, col0 = _fused_moe_tile(
            item, n_col_blocks, TILE_EXPERT, TILE_ROW_START, EXPERT_OFFSETS, BLOCK_M, BLOCK_N
        )
        col_mask = n_idx < intermediate - col0
        gate0 = col0 * pair_step
        x_rows = X + row0 * x_row_stride + m_idx[:, None] * x_row_stride
        w_gate = W + expert * w_expert_stride + gate0 * w_row_stride + gate_rows[None, :] * w_row_stride
        w_up = w_gate + up_shift * w_row_stride
        gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        # One loop for both halves: each x tile is loaded once for the two GEMMs.
        for k0 in range(0, hidden, BLOCK_K):
            k_mask = ks < hidden - k0
            x = tl.load(x_rows + k0 + ks[None, :], mask=row_mask[:, None] & k_mask[None, :], other=0.0)
            w_mask = k_mask[:, None] & col_mask[None, :]
            w_k = k0 * w_k_stride + ks[:, None] * w_k_stride
            wg = tl.load(w_gate + w_k, mask=w_mask, other=0.0)
            wu = tl.load(w_up + w_k, mask=w_mask, other=0.0)
            if UPCAST:
                x = x.to(tl.float32)
                wg = wg.to(tl.float32)
                wu = wu.to(tl.float32)
            gate = tl.dot(x, wg, gate, input_precision=PRECISION)
            up = tl.dot(x, wu, up, input_precision=PRECISION)
        if HAS_BIAS:
            # The expert is loaded data: the row keeps its fill (ASC007).
            bias = BIAS + expert * bias_expert_stride + gate0 + gate_rows
            gate += tl.load(bias, mask=col_mask, other=0.0).to(tl.float32)[None, :]
            up += tl.load(bias + up_shift, mask=col_mask, other=0.0).to(tl.float32)[None, :]
        out_mask = row_mask[:, None] & col_mask[None, :]
        pre = tile_ptrs(PRE, row0, m_idx, pre_row_stride, gate0 + gate_rows)
        gate_out = gate.to(PRE.dtype.element_ty)
        up_out = up.to(PRE.dtype.element_ty)
        tl.store(pre, gate_out, mask=out_mask)
        tl.store(pre + up_shift, up_out, mask=out_mask)
        if CLAMPED:
            # From the stored values: the backward's clamp sees what this one clamped.
            gate = gate_out.to(tl.float32)
            up = up_out.to(tl.float32)
        act = _fused_moe_activation(gate, up, limit, alpha, up_offset, CLAMPED)
        act_ptrs = tile_ptrs(ACT, row0, m_idx, act_row_stride, col0 + n_idx)
        tl.store(act_ptrs, act.to(ACT.dtype.element_ty), mask=out_mask)


@triton.jit
def _fused_moe_expert_matmul_kernel(
    A, W, TILE_EXPERT, TILE_ROW_START, EXPERT_OFFSETS, OUT,
    n_cols, k_dim, a_row_stride, w_expert_stride, w_col_stride, w_k_stride, out_row_stride, N_TILES, n_col_blocks,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    """OUT[r, cols] = sum_k A[r, k] W[e][col, k] over sorted rows r of expert e; the weight's
    strides say its layout (down_proj[e] (H, I) forward, gate_up_proj[e] (2I, H) backward)."""
    pid = tl.program_id(0)
    n_idx = tl.arange(0, BLOCK_N)
    n_items = tl.load(N_TILES) * n_col_blocks
    for item in range(pid, n_items, tl.num_programs(0)):
        expert, row0, m_idx, row_mask, col0 = _fused_moe_tile(
            item, n_col_blocks, TILE_EXPERT, TILE_ROW_START, EXPERT_OFFSETS, BLOCK_M, BLOCK_N
        )
        col_mask = n_idx < n_cols - col0
        w_cols = W + expert * w_expert_stride + col0 * w_col_stride + n_idx[None, :] * w_col_stride
        a_rows = A + row0 * a_row_stride + m_idx[:, None] * a_row_stride
        acc = _fused_moe_matmul_tile(
            a_rows, row_mask, w_cols, col_mask, k_dim, w_k_stride, BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, UPCAST
        )
        out = tile_ptrs(OUT, row0, m_idx, out_row_stride, col0 + n_idx)
        tl.store(out, acc.to(OUT.dtype.element_ty), mask=row_mask[:, None] & col_mask[None, :])


@triton.jit
def _fused_moe_down_backward_kernel(
    DY, W, WEIGHTS, PRE, TILE_EXPERT, TILE_ROW_START, EXPERT_OFFSETS,
    DPRE, WACT, DS_PARTIAL,
    hidden, intermediate, dy_row_stride, w_expert_stride, w_row_stride, w_col_stride, pre_row_stride, dpre_row_stride,
    wact_row_stride, n_rows, N_TILES, n_col_blocks, pair_step, up_shift, limit, alpha, up_offset, CLAMPED: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    """Per sorted row r (DY and WEIGHTS in sorted order: the row's token's incoming gradient and
    routing weight s): d_act = DY[r] @ down_proj[e] for a column block; this block's share of
    <d_act, act> (the routing weight's gradient); the activation's backward of s * d_act into
    DPRE (PRE's gate and up columns, see `epilogue_args`); and s * act (WACT, for down_proj's
    gradient)."""
    pid = tl.program_id(0)
    n_idx = tl.arange(0, BLOCK_N)
    n_items = tl.load(N_TILES) * n_col_blocks
    for item in range(pid, n_items, tl.num_programs(0)):
        expert, row0, m_idx, row_mask, col0 = _fused_moe_tile(
            item, n_col_blocks, TILE_EXPERT, TILE_ROW_START, EXPERT_OFFSETS, BLOCK_M, BLOCK_N
        )
        col_mask = n_idx < intermediate - col0
        s = tl.load(WEIGHTS + row0 + m_idx, mask=row_mask, other=0.0).to(tl.float32)
        # down_proj[e] is (H, I): column i of the product is column i of the weight, k runs over H.
        w_cols = W + expert * w_expert_stride + col0 * w_col_stride + n_idx[None, :] * w_col_stride
        d_act = _fused_moe_matmul_tile(
            DY + row0 * dy_row_stride + m_idx[:, None] * dy_row_stride, row_mask, w_cols, col_mask, hidden, w_row_stride,
            BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, UPCAST,
        )  # fmt: skip
        tile_mask = row_mask[:, None] & col_mask[None, :]
        gate_cols = col0 * pair_step + n_idx * pair_step
        pre = tile_ptrs(PRE, row0, m_idx, pre_row_stride, gate_cols)
        gate = tl.load(pre, mask=tile_mask, other=0.0).to(tl.float32)
        up = tl.load(pre + up_shift, mask=tile_mask, other=0.0).to(tl.float32)
        act, d_gate, d_up = _fused_moe_activation_backward(gate, up, limit, alpha, up_offset, CLAMPED)
        ds = DS_PARTIAL + (item % n_col_blocks) * n_rows + row0 + m_idx
        tl.store(ds, tl.sum(d_act * act, axis=1), mask=row_mask)
        d_act = d_act * s[:, None]
        dpre = tile_ptrs(DPRE, row0, m_idx, dpre_row_stride, gate_cols)
        tl.store(dpre, (d_act * d_gate).to(DPRE.dtype.element_ty), mask=tile_mask)
        tl.store(dpre + up_shift, (d_act * d_up).to(DPRE.dtype.element_ty), mask=tile_mask)
        wact = tile_ptrs(WACT, row0, m_idx, wact_row_stride, col0 + n_idx)
        tl.store(wact, (act * s[:, None]).to(WACT.dtype.element_ty), mask=tile_mask)


@triton.jit
def _fused_moe_weight_grad_kernel(
    P, Q, EXPERT_OFFSETS, DW,
    m_dim, n_dim, p_row_stride, q_row_stride, dw_expert_stride, dw_row_stride, n_items, m_blocks, n_blocks,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    """DW[e][m, n] = sum over expert e's sorted rows r of P[r, m] * Q[r, n] (both in sorted
    order). An expert without rows gets 0. Work items: (expert, block of m, block of n)."""
    pid = tl.program_id(0)
    m_idx = tl.arange(0, BLOCK_M)
    n_idx = tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    for item in range(pid, n_items, tl.num_programs(0)):
        expert = item // (m_blocks * n_blocks)
        m0 = (item // n_blocks % m_blocks) * BLOCK_M
        n0 = (item % n_blocks) * BLOCK_N
        m_mask = m_idx < m_dim - m0
        n_mask = n_idx < n_dim - n0
        row_start = tl.load(EXPERT_OFFSETS + expert)
        n_expert_rows = tl.load(EXPERT_OFFSETS + expert + 1) - row_start
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for r0 in range(0, n_expert_rows, BLOCK_K):
            k_mask = ks < n_expert_rows - r0
            first = (row_start + r0).to(tl.int64)
            p_ptrs = P + first * p_row_stride + m0 + ks[None, :] * p_row_stride + m_idx[:, None]
            q_ptrs = Q + first * q_row_stride + n0 + ks[:, None] * q_row_stride + n_idx[None, :]
            p = tl.load(p_ptrs, mask=m_mask[:, None] & k_mask[None, :], other=0.0)
            q = tl.load(q_ptrs, mask=k_mask[:, None] & n_mask[None, :], other=0.0)
            if UPCAST:
                p = p.to(tl.float32)
                q = q.to(tl.float32)
            acc = tl.dot(p, q, acc, input_precision=PRECISION)
        dw = DW + expert.to(tl.int64) * dw_expert_stride + m0 * dw_row_stride
        dw = dw + m_idx[:, None] * dw_row_stride + n0 + n_idx[None, :]
        tl.store(dw, acc.to(DW.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])


@triton.jit
def _fused_moe_combine_kernel(
    Y, WEIGHTS, ROW_OF_SLOT, BIAS, EXPERT_OF_ROW, OUT,
    n_cols, y_row_stride, bias_expert_stride, out_row_stride, n_items, n_col_blocks,
    TOP_K: tl.constexpr, WEIGHTED: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """OUT[t, cols] = sum_k s[t, k] * (Y[row r of (t, k), cols] (+ BIAS[expert of r, cols])) (s = 1
    unless WEIGHTED), in fp32: each (token, column block) summed by one program, so the sum is
    deterministic."""
    pid = tl.program_id(0)
    n_idx = tl.arange(0, BLOCK_N)
    for item in range(pid, n_items, tl.num_programs(0)):
        token = item // n_col_blocks
        col0 = (item % n_col_blocks) * BLOCK_N
        mask = n_idx < n_cols - col0
        acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for k in range(TOP_K):
            slot = token * TOP_K + k
            row = tl.load(ROW_OF_SLOT + slot).to(tl.int64)
            # A gather (the row is data): it keeps its fill, see ASC007 in tests/perf_rules.py.
            y = tl.load(Y + row * y_row_stride + col0 + n_idx, mask=mask, other=0.0).to(tl.float32)
            if HAS_BIAS:
                # The row's expert's bias: one row at a loaded index, like y's (a gather, its fill kept).
                expert = tl.load(EXPERT_OF_ROW + row).to(tl.int64)
                y += tl.load(BIAS + expert * bias_expert_stride + col0 + n_idx, mask=mask, other=0.0).to(tl.float32)
            if WEIGHTED:
                y = y * tl.load(WEIGHTS + slot).to(tl.float32)
            acc += y
        out = OUT + token.to(tl.int64) * out_row_stride + col0 + n_idx
        tl.store(out, acc.to(OUT.dtype.element_ty), mask=mask)


# -- UB plan --------------------------------------------------------------------------------------

# Tiles in the terms of the UB model (ub_model.md), by hand from the kernels; m, n, k the GEMM
# tile (rows, columns, reduction step), b the operands' element bytes, ``bias`` a bias's (0:
# none). Every GEMM holds its operand tiles (DMA), its fp32 accumulator(s) (once) and the output
# mask.


def gate_up_tiles(m: int, n: int, k: int, b: int, bias: int = 0) -> tuple[Tile, ...]:
    # x, and the gate and up weight tiles; two accumulators; the expert's gate and up bias rows;
    # the epilogue's sigmoid and the product at its peak (the clamped activation clamps in
    # place: the raw values are dead after their clamps); gate, up and act stored.
    operands = (*dma("x", m, k, b), *dma("w_gate", k, n, b), *dma("w_up", k, n, b))
    biases = (*dma("bias_gate", 1, n, bias), *dma("bias_up", 1, n, bias))
    stores = (*dma("pre_gate", m, n, b), *dma("pre_up", m, n, b), *dma("act", m, n, b))
    return (*operands, *once("acc_gate", m, n, FP32), *once("acc_up", m, n, FP32), *biases, *work("f32_", m, n, 2),
            *stores, *mask(m, n))  # fmt: skip


def matmul_tiles(m: int, n: int, k: int, b: int) -> tuple[Tile, ...]:
    return (*dma("a", m, k, b), *dma("w", k, n, b), *once("acc", m, n, FP32), *dma("out", m, n, b), *mask(m, n))


def down_backward_tiles(m: int, n: int, k: int, b: int, clamped: bool = False) -> tuple[Tile, ...]:
    # dy rows and the weight tile; d_act; gate and up loaded; sigmoid, silu, act and the
    # gradient at the epilogue's peak, and with the clamped activation the clamped gate and up
    # beside the raw ones (their gradients' range tests read those); the gate and up gradients
    # and s * act stored.
    operands = (*dma("dy", m, k, b), *dma("w", k, n, b), *once("d_act", m, n, FP32))
    loads = (*dma("gate", m, n, b), *dma("up", m, n, b))
    stores = (*dma("d_gate", m, n, b), *dma("d_up", m, n, b), *dma("wact", m, n, b))
    return (*operands, *loads, *work("f32_", m, n, 6 if clamped else 4), *stores, *mask(m, n))


def weight_grad_tiles(m: int, n: int, k: int, b: int) -> tuple[Tile, ...]:
    return (*dma("p", m, k, b), *dma("q", k, n, b), *once("acc", m, n, FP32), *dma("dw", m, n, b), *mask(m, n))


def combine_tiles(n: int, b: int, bias: int = 0) -> tuple[Tile, ...]:
    # y's row and the row's expert's bias row, each with its fp32 copy; the fp32 sum; out stored.
    rows = (*dma("y", 1, n, b), *dma("bias", 1, n, bias), *f32_copy("bias", 1, n, bias))
    return (*rows, *once("acc", 1, n, FP32), *work("f32_", 1, n, 1), *dma("out", 1, n, b))


GEMM_TILES = {
    "fused_moe_gate_up": gate_up_tiles,
    "fused_moe_expert_matmul": matmul_tiles,
    "fused_moe_down_backward": down_backward_tiles,
    "fused_moe_weight_grad": weight_grad_tiles,
}
COMBINE = "fused_moe_combine"


@dataclass(frozen=True)
class MoEPlan:
    """Rows of a routed tile (the token-row GEMMs' BLOCK_M), each GEMM kernel's (rows, output
    columns, reduction step), the gather-sum's column block, the fp32 dot precision, ``upcast``
    (the interpreter's bf16 ``tl.dot`` is garbage: there bf16 tiles are upcast to fp32 first, the
    same products accumulated in fp32 as on the device), the hardware the tiles were sized for and
    each kernel's tile options beyond its sizes (`plan_moe`: the biases' bytes, the clamped
    activation), by kernel name."""

    block_m: int
    blocks: dict[str, tuple[int, int, int]]
    combine_block: int
    precision: str
    upcast: bool
    elem_bytes: int
    hw: hardware.Hardware
    options: dict[str, dict]

    def block_n(self, name: str) -> int:
        return self.blocks[name][1]

    def gemm(self, name: str) -> dict:
        m, n, k = self.blocks[name]
        return {"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "PRECISION": self.precision, "UPCAST": self.upcast}

    def kernel(self, name: str, items: int, pitches: tuple[int, ...], extent: int) -> KernelPlan:
        """The launch of GEMM kernel ``name`` over at most ``items`` work items: one program per AI
        core (never more than items), its tiles, rows of the given byte pitches, int32 extent."""
        tiles = GEMM_TILES[name](*self.blocks[name], self.elem_bytes, **self.options[name])
        programs = max(1, min(items, self.hw.ai_cores))
        return KernelPlan(name, (programs,), tiles, self.blocks[name][0], pitches, extent)

    def combine(self, items: int, extent: int, bias: bool = False) -> KernelPlan:
        """The gather-sum's launch; ``bias``: this one adds the down projection's bias."""
        tiles = combine_tiles(self.combine_block, self.elem_bytes, **(self.options[COMBINE] if bias else {}))
        return KernelPlan(COMBINE, (max(1, min(items, self.hw.vector_cores)),), tiles, 1, (), extent)


# Each GEMM kernel's tile caps (rows, output columns, reduction step) in `hardware`: the weight
# gradient's apart from the token-row GEMMs'.
WGRAD_KERNELS = frozenset({"fused_moe_weight_grad"})


def _caps(name: str) -> tuple[int, int, int]:
    if name in WGRAD_KERNELS:
        return hardware.MOE_WGRAD_BLOCK_M, hardware.MOE_WGRAD_BLOCK_N, hardware.MOE_WGRAD_BLOCK_K
    return hardware.MOE_ROWS_BLOCK_M, hardware.MOE_ROWS_BLOCK_N, hardware.MOE_ROWS_BLOCK_K


def _gemm_blocks(name: str, b: int, hw: hardware.Hardware, options: dict) -> tuple[int, int, int]:
    """Kernel ``name``'s rows, then widest column block, then longest reduction step, from its
    caps in `hardware` (`_caps`) whose tiles (with ``options``) fit the UB budget."""
    tiles = GEMM_TILES[name]
    m, n, k = _caps(name)

    def fits(n: int, k: int) -> bool:
        return sum(t.nbytes for t in tiles(m, n, k, b, **options)) <= hw.ub_budget

    while not fits(n, k) and n > hardware.MOE_MIN_BLOCK:
        n //= 2
    while not fits(n, k) and k > hardware.MOE_MIN_BLOCK:
        k //= 2
    if not fits(n, k):
        raise AscendLaunchError(
            f"liger-ops-ascend {name}: even {m}x{n}x{k} GEMM tiles overflow the UB; {hw.describe_budget()}"
        )
    return m, n, k


def plan_moe(
    dtype: torch.dtype,
    hw: hardware.Hardware,
    gate_up_bias: bool = False,
    down_bias: bool = False,
    clamped: bool = False,
) -> MoEPlan:
    """Each GEMM kernel's tile from the UB budget (`_gemm_blocks`), never from the token count,
    counting the biases' tiles and the clamped activation's (fused_moe_clamped_swiglu) where the
    op has them. fp32 dots in IEEE precision (HF32 would miss the contract's fp32 tolerance)."""
    b = dtype.itemsize
    options = {name: {} for name in GEMM_TILES}
    options["fused_moe_gate_up"] = {"bias": b if gate_up_bias else 0}
    options["fused_moe_down_backward"] = {"clamped": clamped}
    options[COMBINE] = {"bias": b if down_bias else 0}
    blocks = {name: _gemm_blocks(name, b, hw, options[name]) for name in GEMM_TILES}
    combine = hardware.MOE_COMBINE_BLOCK
    while sum(t.nbytes for t in combine_tiles(combine, b, **options[COMBINE])) > hw.ub_budget:
        combine //= 2
    upcast = dtype == torch.bfloat16 and os.environ.get("TRITON_INTERPRET") == "1"
    return MoEPlan(hardware.MOE_ROWS_BLOCK_M, blocks, combine, "ieee", upcast, b, hw, options)


# -- launch ---------------------------------------------------------------------------------------


def sorted_rows(t: torch.Tensor, r: Routing) -> torch.Tensor:
    """The token rows of ``t`` in expert order (one per selection), row-aligned."""
    return aligned_rows(t.index_select(0, r.token_of_row))


def _transposed(w: torch.Tensor) -> bool:
    """Whether ``w``'s lines are its columns (the transpose of a row-major tensor)."""
    return w.stride(-2) == 1 and w.stride(-1) != 1


def _pitch(t: torch.Tensor) -> int:
    """The byte distance between the lines a tile spans: rows, or a transposed weight's columns."""
    return (t.stride(-1) if _transposed(t) else t.stride(-2)) * t.element_size()


def expert_weight(w: torch.Tensor) -> torch.Tensor:
    """``w`` itself when its lines (its rows, or its columns when it is the transpose of a
    row-major tensor: Llama 4 stores its experts (E, H, 2I) and (E, I, H)) have unit stride and
    32-byte aligned pitches: the kernels read either layout and the op saves it for the
    backward without a copy. Otherwise a copy in padded lines (`aligned_rows`)."""
    if _transposed(w):
        lines = w.transpose(1, 2)
        aligned = aligned_rows(lines)
        return w if aligned is lines else aligned.transpose(1, 2)
    return aligned_rows(w)


def _padded_like(w: torch.Tensor) -> torch.Tensor:
    """An uninitialised tensor of ``w``'s shape and layout (rows or columns), lines padded."""
    if _transposed(w):
        return padded_empty(w.transpose(1, 2).shape, w.dtype, w.device).transpose(1, 2)
    return padded_empty(w.shape, w.dtype, w.device)


def _dense(w: torch.Tensor) -> torch.Tensor:
    """``w`` without its lines' padding (itself when it has none), in its layout."""
    return w.transpose(1, 2).contiguous().transpose(1, 2) if _transposed(w) else w.contiguous()


def _combine(
    y: torch.Tensor,
    weights: torch.Tensor | None,
    r: Routing,
    out: torch.Tensor,
    plan: MoEPlan,
    bias: torch.Tensor | None = None,
) -> None:
    n_tokens, n_cols = out.shape
    if n_tokens == 0:
        return
    n_col_blocks = triton.cdiv(n_cols, plan.combine_block)
    items = n_tokens * n_col_blocks
    launch(
        _fused_moe_combine_kernel, plan.combine(items, y.shape[0] * y.stride(0), bias is not None), plan.hw,
        y, y if weights is None else weights, r.row_of_slot, y if bias is None else bias, r.expert_of_row, out,
        n_cols, y.stride(0), 0 if bias is None else bias.stride(0), out.stride(0), items, n_col_blocks,
        TOP_K=r.row_of_slot.numel() // n_tokens, WEIGHTED=weights is not None, HAS_BIAS=bias is not None,
        BLOCK_N=plan.combine_block,
    )  # fmt: skip


def fused_moe_forward(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    weights: torch.Tensor,
    r: Routing,
    plan: MoEPlan,
    epilogue: dict,
    gate_up_bias: torch.Tensor | None = None,
    down_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, pre)``: the op's output and each sorted row's gate and up, biases added (the
    backward's input), for row-aligned weights; ``epilogue``: the activation's kernel arguments
    (`epilogue_args`)."""
    n_slots = r.token_of_row.numel()
    x_sorted = sorted_rows(x, r)
    hidden, intermediate = x.shape[1], w_down.shape[2]
    pre = padded_empty((n_slots, 2 * intermediate), x.dtype, x.device)
    act = padded_empty((n_slots, intermediate), x.dtype, x.device)
    y = padded_empty((n_slots, hidden), x.dtype, x.device)
    out = x.new_empty(x.shape)
    has_bias = gate_up_bias is not None
    bias_args = (gate_up_bias if has_bias else x, 0 if gate_up_bias is None else gate_up_bias.stride(0))
    if r.max_tiles:
        routing = (r.tile_expert, r.tile_row_start, r.expert_offsets)
        name = "fused_moe_gate_up"
        n_col_blocks = triton.cdiv(intermediate, plan.block_n(name))
        items = r.max_tiles * n_col_blocks
        pitches = (_pitch(x_sorted), _pitch(w_gate_up), _pitch(pre), _pitch(act))
        extent = max(plan.block_m * x_sorted.stride(0), w_gate_up.stride(0), plan.block_m * pre.stride(0))
        launch(
            _fused_moe_gate_up_kernel, plan.kernel(name, items, pitches, extent), plan.hw,
            x_sorted, w_gate_up, bias_args[0], *routing, pre, act,
            hidden, intermediate, x_sorted.stride(0), *w_gate_up.stride(), bias_args[1], pre.stride(0), act.stride(0),
            r.n_tiles, n_col_blocks, HAS_BIAS=has_bias, **epilogue, **plan.gemm(name),
        )  # fmt: skip
        name = "fused_moe_expert_matmul"
        n_col_blocks = triton.cdiv(hidden, plan.block_n(name))
        items = r.max_tiles * n_col_blocks
        pitches = (_pitch(act), _pitch(w_down), _pitch(y))
        extent = max(plan.block_m * act.stride(0), w_down.stride(0), plan.block_m * y.stride(0))
        launch(
            _fused_moe_expert_matmul_kernel, plan.kernel(name, items, pitches, extent), plan.hw,
            act, w_down, *routing, y,
            hidden, intermediate, act.stride(0), *w_down.stride(), y.stride(0),
            r.n_tiles, n_col_blocks, **plan.gemm(name),
        )  # fmt: skip
    _combine(y, weights, r, out, plan, down_bias)
    return out, pre


def fused_moe_backward(
    dy: torch.Tensor,
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    weights: torch.Tensor,
    pre: torch.Tensor,
    r: Routing,
    plan: MoEPlan,
    epilogue: dict,
    overwrite_pre: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(grad_x, grad_gate_up, grad_down, ds, dpre)`` for row-aligned weights: ``ds`` the routing
    weights' fp32 gradient from the activations (`routing_weights_grad`), ``dpre`` the gate-up
    output's gradient (the gate-up bias's, summed per expert), written over ``pre`` when
    ``overwrite_pre`` (`backward_frees_graph`): a (rows, 2I) view, its rows padded
    in memory only (`padded_empty`)."""
    n_slots = r.token_of_row.numel()
    dy_sorted = sorted_rows(dy, r)
    weights_sorted = weights.reshape(-1).index_select(0, r.slot_of_row)
    hidden, intermediate = w_down.shape[1:]
    col_blocks = triton.cdiv(intermediate, plan.block_n("fused_moe_down_backward"))
    dpre = pre if overwrite_pre else padded_empty((n_slots, 2 * intermediate), x.dtype, x.device)
    wact = padded_empty((n_slots, intermediate), x.dtype, x.device)
    ds_partial = torch.zeros(col_blocks, n_slots, dtype=torch.float32, device=x.device)
    dx = x.new_empty(x.shape)
    routing = (r.tile_expert, r.tile_row_start, r.expert_offsets)
    if r.max_tiles:
        items = r.max_tiles * col_blocks
        pitches = (_pitch(dy_sorted), _pitch(w_down), _pitch(pre), _pitch(dpre), _pitch(wact))
        extent = max(plan.block_m * dy_sorted.stride(0), plan.block_m * dpre.stride(0), w_down.stride(0))
        name = "fused_moe_down_backward"
        launch(
            _fused_moe_down_backward_kernel, plan.kernel(name, items, pitches, extent), plan.hw,
            dy_sorted, w_down, weights_sorted, pre, *routing, dpre, wact, ds_partial,
            hidden, intermediate, dy_sorted.stride(0), *w_down.stride(), pre.stride(0), dpre.stride(0),
            wact.stride(0), n_slots, r.n_tiles, col_blocks, **epilogue, **plan.gemm(name),
        )  # fmt: skip
    # grad_down[e] (H, I) = sum_r dy[t_r] (x) s_r act_r, first: the sorted grad_out and the
    # weighted activation are freed before the input gradient's rows exist (a lower peak).
    d_down = _weight_grad(w_down, dy_sorted, wact, r, plan)
    del dy_sorted, wact
    dx_rows = padded_empty((n_slots, hidden), x.dtype, x.device)
    if r.max_tiles:
        # gate_up_proj[e] is (2I, H): column h of the product is column h of the weight, k runs over 2I.
        name = "fused_moe_expert_matmul"
        n_col_blocks = triton.cdiv(hidden, plan.block_n(name))
        items = r.max_tiles * n_col_blocks
        pitches = (_pitch(dpre), _pitch(w_gate_up), _pitch(dx_rows))
        extent = max(plan.block_m * dpre.stride(0), w_gate_up.stride(0), plan.block_m * dx_rows.stride(0))
        launch(
            _fused_moe_expert_matmul_kernel, plan.kernel(name, items, pitches, extent), plan.hw,
            dpre, w_gate_up, *routing, dx_rows,
            hidden, 2 * intermediate, dpre.stride(0), w_gate_up.stride(0), w_gate_up.stride(2), w_gate_up.stride(1),
            dx_rows.stride(0), r.n_tiles, n_col_blocks, **plan.gemm(name),
        )  # fmt: skip
    _combine(dx_rows, None, r, dx, plan)
    del dx_rows
    # grad_gate_up[e] (2I, H) = sum_r dpre_r (x) x[t_r].
    d_gate_up = _weight_grad(w_gate_up, dpre, sorted_rows(x, r), r, plan)
    return dx, d_gate_up, d_down, routing_weights_grad(ds_partial, r, weights), dpre


def _weight_grad(weight: torch.Tensor, p: torch.Tensor, q: torch.Tensor, r: Routing, plan: MoEPlan) -> torch.Tensor:
    """``dw[e] = sum over expert e's sorted rows r of p[r] (x) q[r]``, dense, in ``weight``'s
    layout: a transposed weight's gradient is written as the transposed product, so the kernel's
    stores stay aligned rows."""
    dw = grad = _padded_like(weight)
    if _transposed(dw):
        dw, p, q = dw.transpose(1, 2), q, p
    n_experts, m_dim, n_dim = dw.shape
    name = "fused_moe_weight_grad"
    m_blocks, n_blocks = triton.cdiv(m_dim, plan.blocks[name][0]), triton.cdiv(n_dim, plan.block_n(name))
    items = n_experts * m_blocks * n_blocks
    pitches = (_pitch(p), _pitch(q), _pitch(dw))
    block_k = plan.blocks[name][2]
    extent = max(block_k * p.stride(0), block_k * q.stride(0), dw.stride(0))
    launch(
        _fused_moe_weight_grad_kernel, plan.kernel(name, items, pitches, extent), plan.hw,
        p, q, r.expert_offsets, dw,
        m_dim, n_dim, p.stride(0), q.stride(0), dw.stride(0), dw.stride(1), items, m_blocks, n_blocks,
        **plan.gemm(name),
    )  # fmt: skip
    return _dense(grad)


def routing_weights_grad(ds_partial: torch.Tensor, r: Routing, weights: torch.Tensor) -> torch.Tensor:
    """The routing weights' fp32 gradient: the column blocks' partial dot products, back in (t, k) order."""
    return ds_partial.sum(0)[r.row_of_slot.long()].view(weights.shape)


class FusedMoEKernels:
    """`liger_core.drivers.fused_moe.FusedMoEKernels` on this module's kernels: the activations and the incoming gradient as given (`sorted_rows` gathers them into aligned rows)."""

    protocol = fused_moe_driver.PROTOCOL

    @staticmethod
    def plan(hidden_states, intermediate, gate_up_bias, down_bias, clamped):
        return plan_moe(hidden_states.dtype, hardware.current(hidden_states.device), gate_up_bias, down_bias, clamped)

    @staticmethod
    def inputs(hidden_states, gate_up_proj, down_proj):
        return hidden_states, expert_weight(gate_up_proj), expert_weight(down_proj)

    forward = staticmethod(fused_moe_forward)

    @staticmethod
    def backward(dy, x, w_gate_up, w_down, weights, pre, r, plan, epilogue, overwrite_pre):
        return fused_moe_backward(dy, x, w_gate_up, w_down, weights, pre, r, plan, epilogue, overwrite_pre)


_functions = fused_moe_driver.autograd_functions(FusedMoEKernels(), __name__)
LigerFusedMoEFunction = implements("fused_moe")(_functions["fused_moe"])
LigerFusedMoEClampedSwiGLUFunction = implements("fused_moe_clamped_swiglu")(_functions["fused_moe_clamped_swiglu"])
