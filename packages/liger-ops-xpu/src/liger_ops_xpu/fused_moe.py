"""The routed SwiGLU experts of an MoE MLP (``fused_moe``) for Intel GPUs (XPU): grouped GEMM Triton
kernels over the selections sorted by expert, launch plan and the kernel
adapter of `liger_core.drivers.fused_moe`.

The selections ``(token, k)`` are sorted by expert on the device (`liger_core.ops.fused_moe.route`,
no host synchronisation) and cut into tiles of BLOCK_M rows that never span two experts; the
routed grids launch the tile count's upper bound and the programs past the real count (a device
value) exit at once. Forward: the gate-up GEMM gathers its token rows and applies SiLU(gate) * up in its
epilogue (saving gate and up for the backward), the down GEMM writes each selection's output, and
a gather-sum (one program per token: deterministic, no atomics) weights and adds the K
selections in fp32. Backward: grad_out @ down_proj[e] per selection, the SwiGLU backward and the
routing weights' gradient (per column block partial dot products, summed on the host) in one
kernel's epilogue; grad_hidden_states through the gate-up weights and the same gather-sum; the
weight gradients one program per (expert, tile of the weight), reducing over that expert's rows.
Every GEMM accumulates in fp32 and rounds once.

``fused_moe_clamped_swiglu`` (GPT-OSS's experts) runs on the same kernels: per-expert biases added
in the gate-up epilogue and the gather-sum, gate and up columns interleaved or concatenated, and
the clamped SwiGLU as the epilogue's activation (constexpr CLAMPED); its biases' gradients are
core's shared GEMMs over the routing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import fused_moe as fused_moe_driver
from liger_core.ops.fused_moe import Routing

from liger_ops_xpu import hardware
from liger_ops_xpu._tiling import static_trips


@triton.jit
def _fused_moe_tile_rows(TILE_EXPERT, TILE_ROW_START, EXPERT_OFFSETS, BLOCK_M: tl.constexpr):
    """This program's expert, its sorted rows and their mask (rows past the expert's end)."""
    tile = tl.program_id(0)
    expert = tl.load(TILE_EXPERT + tile)
    rows = tl.load(TILE_ROW_START + tile) + tl.arange(0, BLOCK_M)
    row_mask = rows < tl.load(EXPERT_OFFSETS + expert + 1)
    return expert.to(tl.int64), rows.to(tl.int64), row_mask


@triton.jit
def _fused_moe_matmul_tile(
    A_ROWS, row_mask, W_COLS, col_mask, k_dim, w_k_stride,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    K_STEPS: tl.constexpr,
):  # fmt: skip
    """fp32 ``A[rows, :] @ W[:, cols]`` over ``k_dim``: ``A_ROWS`` points at each row's first
    element (BLOCK_M x 1, unit column stride), ``W_COLS`` at each column's (1 x BLOCK_N)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    ks = tl.arange(0, BLOCK_K)
    for step in range(K_STEPS if K_STEPS > 0 else tl.cdiv(k_dim, BLOCK_K)):
        k = step * BLOCK_K + ks
        k_mask = k < k_dim
        a = tl.load(A_ROWS + k[None, :], mask=row_mask[:, None] & k_mask[None, :], other=0.0)
        w = tl.load(W_COLS + k[:, None] * w_k_stride, mask=k_mask[:, None] & col_mask[None, :], other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            w = w.to(tl.float32)
        acc = tl.dot(a, w, acc, input_precision=PRECISION)
    return acc


@triton.jit
def _fused_moe_activation(gate, up, limit, alpha, up_offset, CLAMPED: tl.constexpr):
    """The experts' activation of fp32 gate and up: silu(gate) * up (fused_moe), or CLAMPED
    (fused_moe_clamped_swiglu) min(gate, limit) * sigmoid(alpha * .) * (clamp(up, +-limit) + up_offset)."""
    if CLAMPED:
        gate = tl.minimum(gate, limit)
        up = tl.minimum(tl.maximum(up, -limit), limit)
        act = gate * tl.sigmoid(alpha * gate) * (up + up_offset)
    else:
        act = gate * tl.sigmoid(gate) * up
    return act


@triton.jit
def _fused_moe_activation_backward(gate, up, limit, alpha, up_offset, CLAMPED: tl.constexpr):
    """``(act, d act / d gate, d act / d up)`` at fp32 gate and up (a clamp passes the gradient
    inside its closed range, as torch.clamp)."""
    if CLAMPED:
        gate_c = tl.minimum(gate, limit)
        up_c = tl.minimum(tl.maximum(up, -limit), limit)
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
    X, W, BIAS, TOKEN_OF_ROW, TILE_EXPERT, TILE_ROW_START, EXPERT_OFFSETS, N_TILES, PRE, ACT,
    hidden, intermediate, x_row_stride, w_expert_stride, w_row_stride, w_k_stride, bias_expert_stride,
    pre_row_stride, act_row_stride, pair_step, up_shift, limit, alpha, up_offset,
    HAS_BIAS: tl.constexpr, CLAMPED: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    K_STEPS: tl.constexpr,
):  # fmt: skip
    """Per sorted row r (token t, expert e): gate, up = W[e] @ x[t] (+ BIAS[e]) for this
    program's gate columns j (W's rows j * pair_step, and up_shift further the up ones, see
    `epilogue_args`); stores them (PRE, same columns, for the backward) and the activation (ACT).
    W[e] is (2I, H) with strides (w_row_stride, w_k_stride): either may be the unit one (see
    `expert_weight`)."""
    if tl.program_id(0) >= tl.load(N_TILES):  # past the routing's tiles (the grid's upper bound)
        return
    expert, rows, row_mask = _fused_moe_tile_rows(TILE_EXPERT, TILE_ROW_START, EXPERT_OFFSETS, BLOCK_M)
    tokens = tl.load(TOKEN_OF_ROW + rows, mask=row_mask, other=0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < intermediate
    x_rows = X + tokens[:, None] * x_row_stride
    gate_rows = cols.to(tl.int64) * pair_step
    w_gate = W + expert * w_expert_stride + gate_rows[None, :] * w_row_stride
    w_up = w_gate + up_shift * w_row_stride
    gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    ks = tl.arange(0, BLOCK_K)
    # One loop for both halves: each x tile is loaded once for the two GEMMs.
    for step in range(K_STEPS if K_STEPS > 0 else tl.cdiv(hidden, BLOCK_K)):
        k = step * BLOCK_K + ks
        k_mask = k < hidden
        x = tl.load(x_rows + k[None, :], mask=row_mask[:, None] & k_mask[None, :], other=0.0)
        w_mask = k_mask[:, None] & col_mask[None, :]
        wg = tl.load(w_gate + k[:, None] * w_k_stride, mask=w_mask, other=0.0)
        wu = tl.load(w_up + k[:, None] * w_k_stride, mask=w_mask, other=0.0)
        if UPCAST:
            x = x.to(tl.float32)
            wg = wg.to(tl.float32)
            wu = wu.to(tl.float32)
        gate = tl.dot(x, wg, gate, input_precision=PRECISION)
        up = tl.dot(x, wu, up, input_precision=PRECISION)
    if HAS_BIAS:
        bias = BIAS + expert * bias_expert_stride + gate_rows
        gate += tl.load(bias, mask=col_mask, other=0.0).to(tl.float32)[None, :]
        up += tl.load(bias + up_shift, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    mask = row_mask[:, None] & col_mask[None, :]
    pre = PRE + rows[:, None] * pre_row_stride + gate_rows[None, :]
    gate_out = gate.to(PRE.dtype.element_ty)
    up_out = up.to(PRE.dtype.element_ty)
    tl.store(pre, gate_out, mask=mask)
    tl.store(pre + up_shift, up_out, mask=mask)
    if CLAMPED:
        # From the stored values: the backward's clamp sees what this one clamped.
        gate = gate_out.to(tl.float32)
        up = up_out.to(tl.float32)
    act = _fused_moe_activation(gate, up, limit, alpha, up_offset, CLAMPED)
    tl.store(ACT + rows[:, None] * act_row_stride + cols[None, :], act.to(ACT.dtype.element_ty), mask=mask)


@triton.jit
def _fused_moe_expert_matmul_kernel(
    A, W, TILE_EXPERT, TILE_ROW_START, EXPERT_OFFSETS, N_TILES, OUT,
    n_cols, k_dim, a_row_stride, w_expert_stride, w_col_stride, w_k_stride, out_row_stride,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    K_STEPS: tl.constexpr,
):  # fmt: skip
    """OUT[r, cols] = sum_k A[r, k] W[e][col, k] over sorted rows r of expert e; the weight's
    strides say its layout (down_proj[e] (H, I) forward, gate_up_proj[e] (2I, H) backward)."""
    if tl.program_id(0) >= tl.load(N_TILES):
        return
    expert, rows, row_mask = _fused_moe_tile_rows(TILE_EXPERT, TILE_ROW_START, EXPERT_OFFSETS, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    w_cols = W + expert * w_expert_stride + cols[None, :].to(tl.int64) * w_col_stride
    acc = _fused_moe_matmul_tile(
        A + rows[:, None] * a_row_stride, row_mask, w_cols, col_mask, k_dim, w_k_stride,
        BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, UPCAST, K_STEPS,
    )  # fmt: skip
    out = OUT + rows[:, None] * out_row_stride + cols[None, :]
    tl.store(out, acc.to(OUT.dtype.element_ty), mask=row_mask[:, None] & col_mask[None, :])


@triton.jit
def _fused_moe_down_backward_kernel(
    DY, W, WEIGHTS, PRE, TOKEN_OF_ROW, SLOT_OF_ROW, TILE_EXPERT, TILE_ROW_START, EXPERT_OFFSETS, N_TILES,
    DPRE, WACT, DS_PARTIAL,
    hidden, intermediate, dy_row_stride, w_expert_stride, w_row_stride, w_col_stride, pre_row_stride, dpre_row_stride,
    wact_row_stride, n_rows, pair_step, up_shift, limit, alpha, up_offset, CLAMPED: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    K_STEPS: tl.constexpr,
):  # fmt: skip
    """Per sorted row r (token t, routing weight s): d_act = dy[t] @ down_proj[e] for this
    program's columns; this block's share of <d_act, act> (the routing weight's gradient);
    the activation's backward of s * d_act into DPRE (PRE's columns); and s * act (WACT, for
    down_proj's gradient)."""
    if tl.program_id(0) >= tl.load(N_TILES):
        return
    expert, rows, row_mask = _fused_moe_tile_rows(TILE_EXPERT, TILE_ROW_START, EXPERT_OFFSETS, BLOCK_M)
    tokens = tl.load(TOKEN_OF_ROW + rows, mask=row_mask, other=0).to(tl.int64)
    s = tl.load(WEIGHTS + tl.load(SLOT_OF_ROW + rows, mask=row_mask, other=0), mask=row_mask, other=0.0)
    s = s.to(tl.float32)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < intermediate
    # down_proj[e] is (H, I): column i of the product is column i of the weight, k runs over H.
    w_cols = W + expert * w_expert_stride + cols[None, :].to(tl.int64) * w_col_stride
    d_act = _fused_moe_matmul_tile(
        DY + tokens[:, None] * dy_row_stride, row_mask, w_cols, col_mask, hidden, w_row_stride,
        BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, UPCAST, K_STEPS,
    )  # fmt: skip
    mask = row_mask[:, None] & col_mask[None, :]
    gate_cols = cols[None, :].to(tl.int64) * pair_step
    pre = PRE + rows[:, None] * pre_row_stride + gate_cols
    gate = tl.load(pre, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(pre + up_shift, mask=mask, other=0.0).to(tl.float32)
    act, d_gate, d_up = _fused_moe_activation_backward(gate, up, limit, alpha, up_offset, CLAMPED)
    tl.store(DS_PARTIAL + tl.program_id(1).to(tl.int64) * n_rows + rows, tl.sum(d_act * act, axis=1), mask=row_mask)
    d_act = d_act * s[:, None]
    dpre = DPRE + rows[:, None] * dpre_row_stride + gate_cols
    tl.store(dpre, (d_act * d_gate).to(DPRE.dtype.element_ty), mask=mask)
    tl.store(dpre + up_shift, (d_act * d_up).to(DPRE.dtype.element_ty), mask=mask)
    wact = WACT + rows[:, None] * wact_row_stride + cols[None, :]
    tl.store(wact, (act * s[:, None]).to(WACT.dtype.element_ty), mask=mask)


@triton.jit
def _fused_moe_weight_grad_kernel(
    P, Q, TOKEN_OF_ROW, EXPERT_OFFSETS, DW,
    m_dim, n_dim, p_row_stride, q_row_stride, dw_expert_stride, dw_row_stride,
    P_BY_TOKEN: tl.constexpr, Q_BY_TOKEN: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    K_STEPS: tl.constexpr,
):  # fmt: skip
    """DW[e][m, n] = sum over expert e's sorted rows r of P[r, m] * Q[r, n], where P's (Q's)
    row r is the row of its token when P_BY_TOKEN (Q_BY_TOKEN). An expert without rows gets 0."""
    m_tiles = tl.cdiv(m_dim, BLOCK_M)
    expert = tl.program_id(0) // m_tiles
    ms = (tl.program_id(0) % m_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    ns = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = ms < m_dim
    n_mask = ns < n_dim
    row_start = tl.load(EXPERT_OFFSETS + expert)
    row_end = tl.load(EXPERT_OFFSETS + expert + 1)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(K_STEPS if K_STEPS > 0 else tl.cdiv(row_end - row_start, BLOCK_K)):
        rows = row_start + step * BLOCK_K + ks
        k_mask = rows < row_end
        p_rows = rows.to(tl.int64)
        q_rows = rows.to(tl.int64)
        if P_BY_TOKEN:
            p_rows = tl.load(TOKEN_OF_ROW + rows, mask=k_mask, other=0).to(tl.int64)
        if Q_BY_TOKEN:
            q_rows = tl.load(TOKEN_OF_ROW + rows, mask=k_mask, other=0).to(tl.int64)
        p = tl.load(P + p_rows[None, :] * p_row_stride + ms[:, None], mask=m_mask[:, None] & k_mask[None, :], other=0.0)
        q = tl.load(Q + q_rows[:, None] * q_row_stride + ns[None, :], mask=k_mask[:, None] & n_mask[None, :], other=0.0)
        if UPCAST:
            p = p.to(tl.float32)
            q = q.to(tl.float32)
        acc = tl.dot(p, q, acc, input_precision=PRECISION)
    dw = DW + expert.to(tl.int64) * dw_expert_stride + ms[:, None].to(tl.int64) * dw_row_stride + ns[None, :]
    tl.store(dw, acc.to(DW.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])


@triton.jit
def _fused_moe_combine_kernel(
    Y, WEIGHTS, ROW_OF_SLOT, BIAS, EXPERT_OF_ROW, OUT, n_cols, y_row_stride, bias_expert_stride, out_row_stride,
    TOP_K: tl.constexpr, WEIGHTED: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """OUT[t, cols] = sum_k s[t, k] * (Y[row r of (t, k), cols] (+ BIAS[expert of r, cols])) (s = 1
    unless WEIGHTED), in fp32: one program per (token, column block), so the sum is deterministic."""
    token = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k in range(TOP_K):
        slot = token * TOP_K + k
        row = tl.load(ROW_OF_SLOT + slot).to(tl.int64)
        y = tl.load(Y + row * y_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_BIAS:
            expert = tl.load(EXPERT_OF_ROW + row).to(tl.int64)
            y += tl.load(BIAS + expert * bias_expert_stride + cols, mask=mask, other=0.0).to(tl.float32)
        if WEIGHTED:
            y = y * tl.load(WEIGHTS + slot).to(tl.float32)
        acc += y
    tl.store(OUT + token * out_row_stride + cols, acc.to(OUT.dtype.element_ty), mask=mask)


# -- launch -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GemmTiles:
    """One family of grouped GEMMs' tile (rows, output columns, reduction step) and launch options."""

    block_m: int
    block_n: int
    block_k: int
    launch: dict


@dataclass(frozen=True)
class MoEPlan:
    """The token-row GEMMs' tiles (``rows``: gate-up, down, grad of the input, down backward; its
    BLOCK_M is the routing tile), the weight-gradient GEMM's (``wgrad``), the gather-sum's column
    block, the fp32 dot precision, and ``upcast``: the interpreter's bf16 ``tl.dot`` is garbage,
    so there bf16 tiles are upcast to fp32 first (the same products, exact in fp32, accumulated in
    fp32 as on the device)."""

    rows: GemmTiles
    wgrad: GemmTiles
    combine_block: int
    precision: str
    upcast: bool

    @property
    def block_m(self) -> int:
        """The routing tile: rows of one expert's sorted selections per program."""
        return self.rows.block_m

    def gemm(self, tiles: GemmTiles) -> dict:
        return dict(
            BLOCK_M=tiles.block_m,
            BLOCK_N=tiles.block_n,
            BLOCK_K=tiles.block_k,
            PRECISION=self.precision,
            UPCAST=self.upcast,
            **tiles.launch,
        )


def plan_moe(dtype: torch.dtype, device: torch.device) -> MoEPlan:
    """The GEMM tiles for ``dtype``: fp32 tiles take twice the shared local memory per element,
    so half the reduction step; fp32 dots in IEEE precision (TF32 would miss the contract's fp32
    tolerance); the large register file on an XPU (``hardware.launch_kwargs``)."""
    wide = dtype == torch.float32
    hw = hardware
    return MoEPlan(
        rows=GemmTiles(
            hw.MOE_ROWS_BLOCK_M,
            hw.MOE_ROWS_BLOCK_N,
            hw.MOE_ROWS_BLOCK_K // 2 if wide else hw.MOE_ROWS_BLOCK_K,
            hw.launch_kwargs(_fused_moe_gate_up_kernel, device, hw.MOE_ROWS_NUM_WARPS),
        ),
        wgrad=GemmTiles(
            hw.MOE_WGRAD_BLOCK_M,
            hw.MOE_WGRAD_BLOCK_N,
            hw.MOE_WGRAD_BLOCK_K // 2 if wide else hw.MOE_WGRAD_BLOCK_K,
            hw.launch_kwargs(_fused_moe_weight_grad_kernel, device, hw.MOE_WGRAD_NUM_WARPS),
        ),
        combine_block=hw.MOE_COMBINE_BLOCK,
        precision="ieee" if wide else "tf32",
        upcast=dtype == torch.bfloat16 and hw.interpreting(_fused_moe_gate_up_kernel),
    )


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
    grid = (n_tokens, triton.cdiv(n_cols, plan.combine_block))
    _fused_moe_combine_kernel[grid](
        y, y if weights is None else weights, r.row_of_slot, y if bias is None else bias, r.expert_of_row, out,
        n_cols, y.stride(0), 0 if bias is None else bias.stride(0), out.stride(0),
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
    backward's input); ``epilogue``: the activation's kernel arguments (`epilogue_args`)."""
    n_slots = r.token_of_row.numel()
    hidden, intermediate = x.shape[1], w_down.shape[2]
    pre = x.new_empty(n_slots, 2 * intermediate)
    act = x.new_empty(n_slots, intermediate)
    y = x.new_empty(n_slots, hidden)
    out = x.new_empty(x.shape)
    has_bias = gate_up_bias is not None
    bias_args = (gate_up_bias if has_bias else x, 0 if gate_up_bias is None else gate_up_bias.stride(0))
    if r.max_tiles:
        routing = (r.tile_expert, r.tile_row_start, r.expert_offsets, r.n_tiles)
        _fused_moe_gate_up_kernel[(r.max_tiles, triton.cdiv(intermediate, plan.rows.block_n))](
            x, w_gate_up, bias_args[0], r.token_of_row, *routing, pre, act,
            hidden, intermediate, x.stride(0), *w_gate_up.stride(), bias_args[1], pre.stride(0), act.stride(0),
            HAS_BIAS=has_bias, **epilogue,
            K_STEPS=static_trips(_fused_moe_gate_up_kernel, triton.cdiv(hidden, plan.rows.block_k)),
            **plan.gemm(plan.rows),
        )  # fmt: skip
        _fused_moe_expert_matmul_kernel[(r.max_tiles, triton.cdiv(hidden, plan.rows.block_n))](
            act, w_down, *routing, y,
            hidden, intermediate, act.stride(0), *w_down.stride(), y.stride(0),
            K_STEPS=static_trips(_fused_moe_expert_matmul_kernel, triton.cdiv(intermediate, plan.rows.block_k)),
            **plan.gemm(plan.rows),
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
    """``(grad_x, grad_gate_up, grad_down, ds, dpre)`` for contiguous ``dy``: ``ds`` the routing
    weights' fp32 gradient from the activations (`routing_weights_grad`), ``dpre`` the gate-up
    output's gradient (the gate-up bias's, summed per expert), written over ``pre`` when
    ``overwrite_pre`` (`backward_frees_graph`)."""
    n_slots = r.token_of_row.numel()
    hidden, intermediate = w_down.shape[1:]
    col_blocks = triton.cdiv(intermediate, plan.rows.block_n)
    dpre = pre if overwrite_pre else x.new_empty(n_slots, 2 * intermediate)
    wact = x.new_empty(n_slots, intermediate)
    ds_partial = torch.zeros(col_blocks, n_slots, dtype=torch.float32, device=x.device)
    dx = x.new_empty(x.shape)
    routing = (r.tile_expert, r.tile_row_start, r.expert_offsets, r.n_tiles)
    if r.max_tiles:
        _fused_moe_down_backward_kernel[(r.max_tiles, col_blocks)](
            dy, w_down, weights, pre, r.token_of_row, r.slot_of_row, *routing, dpre, wact, ds_partial,
            hidden, intermediate, dy.stride(0), *w_down.stride(), pre.stride(0), dpre.stride(0),
            wact.stride(0), n_slots, **epilogue,
            K_STEPS=static_trips(_fused_moe_down_backward_kernel, triton.cdiv(hidden, plan.rows.block_k)),
            **plan.gemm(plan.rows),
        )  # fmt: skip
    # grad_down[e] (H, I) = sum_r dy[t_r] (x) s_r act_r, first: the weighted activation is freed
    # before the input gradient's rows exist (a lower peak).
    d_down = _weight_grad(w_down, dy, wact, True, False, r, plan)
    del wact
    dx_rows = x.new_empty(n_slots, hidden)
    if r.max_tiles:
        # gate_up_proj[e] is (2I, H): column h of the product is column h of the weight, k runs over 2I.
        _fused_moe_expert_matmul_kernel[(r.max_tiles, triton.cdiv(hidden, plan.rows.block_n))](
            dpre, w_gate_up, *routing, dx_rows,
            hidden, 2 * intermediate, dpre.stride(0), w_gate_up.stride(0), w_gate_up.stride(2), w_gate_up.stride(1),
            dx_rows.stride(0),
            K_STEPS=static_trips(_fused_moe_expert_matmul_kernel, triton.cdiv(2 * intermediate, plan.rows.block_k)),
            **plan.gemm(plan.rows),
        )  # fmt: skip
    _combine(dx_rows, None, r, dx, plan)
    del dx_rows
    # grad_gate_up[e] (2I, H) = sum_r dpre_r (x) x[t_r].
    d_gate_up = _weight_grad(w_gate_up, dpre, x, False, True, r, plan)
    return dx, d_gate_up, d_down, routing_weights_grad(ds_partial, r, weights), dpre


def _weight_grad(
    weight: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor,
    p_by_token: bool,
    q_by_token: bool,
    r: Routing,
    plan: MoEPlan,
) -> torch.Tensor:
    """``dw[e] = sum over expert e's sorted rows r of p[r] (x) q[r]`` (``p``'s, ``q``'s row of the
    row's token when ``p_by_token``, ``q_by_token``), in ``weight``'s layout (empty_like keeps the
    strides): a transposed weight's gradient is written as the transposed product, so the
    kernel's stores stay rows."""
    # The interpreter needs the row loop's trip count as a constant: the busiest expert's (a
    # host read there only; one masked-off trip without rows, as 0 means a runtime count).
    max_rows = int(r.expert_offsets.diff().max()) if static_trips(_fused_moe_weight_grad_kernel, 1) else 0
    row_steps = static_trips(_fused_moe_weight_grad_kernel, max(1, triton.cdiv(max_rows, plan.wgrad.block_k)))
    dw = grad = torch.empty_like(weight)
    if dw.stride(2) != 1:
        dw, p, q, p_by_token, q_by_token = dw.transpose(1, 2), q, p, q_by_token, p_by_token
    n_experts, m_dim, n_dim = dw.shape
    grid = (n_experts * triton.cdiv(m_dim, plan.wgrad.block_m), triton.cdiv(n_dim, plan.wgrad.block_n))
    _fused_moe_weight_grad_kernel[grid](
        p, q, r.token_of_row, r.expert_offsets, dw,
        m_dim, n_dim, p.stride(0), q.stride(0), dw.stride(0), dw.stride(1),
        P_BY_TOKEN=p_by_token, Q_BY_TOKEN=q_by_token, K_STEPS=row_steps, **plan.gemm(plan.wgrad),
    )  # fmt: skip
    return grad


def routing_weights_grad(ds_partial: torch.Tensor, r: Routing, weights: torch.Tensor) -> torch.Tensor:
    """The routing weights' fp32 gradient: the column blocks' partial dot products, back in (t, k) order."""
    return ds_partial.sum(0)[r.row_of_slot.long()].view(weights.shape)


def expert_weight(w: torch.Tensor) -> torch.Tensor:
    """``w`` itself when it is contiguous or the transpose of a contiguous tensor (Llama 4 stores
    its experts (E, H, 2I) and (E, I, H)): the kernels read either layout, and the op saves it
    for the backward without a copy. Any other layout is copied contiguous."""
    return w if w.is_contiguous() or w.transpose(1, 2).is_contiguous() else w.contiguous()


class FusedMoEKernels:
    """`liger_core.drivers.fused_moe.FusedMoEKernels` on this module's kernels."""

    protocol = fused_moe_driver.PROTOCOL

    @staticmethod
    def plan(hidden_states, intermediate, gate_up_bias, down_bias, clamped):
        return plan_moe(hidden_states.dtype, hidden_states.device)

    @staticmethod
    def inputs(hidden_states, gate_up_proj, down_proj):
        return hidden_states.contiguous(), expert_weight(gate_up_proj), expert_weight(down_proj)

    forward = staticmethod(fused_moe_forward)

    @staticmethod
    def backward(dy, x, w_gate_up, w_down, weights, pre, r, plan, epilogue, overwrite_pre):
        return fused_moe_backward(dy.contiguous(), x, w_gate_up, w_down, weights, pre, r, plan, epilogue, overwrite_pre)


_functions = fused_moe_driver.autograd_functions(FusedMoEKernels(), __name__)
LigerFusedMoEFunction = implements("fused_moe")(_functions["fused_moe"])
LigerFusedMoEClampedSwiGLUFunction = implements("fused_moe_clamped_swiglu")(_functions["fused_moe_clamped_swiglu"])
